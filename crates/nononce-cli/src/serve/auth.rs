//! Bearer tokens: who may call, for which kinds, how fast.
//!
//! The tokens file (`--tokens-file`) is TOML, one `[[token]]` table per token:
//!
//! ```toml
//! [[token]]
//! name = "billing"            # shown in errors; the token itself never is
//! sha256 = "9f86d0…"          # printf %s "$TOKEN" | sha256sum
//! kinds = ["counter"]         # optional: the kinds it may take (default: all)
//! nonces_per_second = 100000  # its rate limit; a burst of one second's worth
//! ```
//!
//! Only the tokens' SHA-256 digests are kept, in the file and in memory: a token is found by
//! hashing what the caller presents.

use std::collections::HashMap;
use std::num::NonZeroU32;
use std::path::Path;

use governor::clock::Clock;
use governor::{DefaultDirectRateLimiter, Quota, RateLimiter};
use sha2::{Digest, Sha256};

use super::request::{ApiError, parse_kind};
use crate::codec::Kind;

/// How to make a token's `sha256`, for the messages that ask for one.
const HOW_TO_HASH: &str = "printf %s \"$TOKEN\" | sha256sum";

/// What a caller sends, for the messages that ask for it.
const HOW_TO_SEND: &str = "send the header Authorization: Bearer TOKEN";

/// The tokens a server accepts; without a tokens file, every caller is let in.
pub struct Tokens {
    /// `None`: no tokens file, every caller may call.
    entries: Option<Vec<Token>>,
    /// A token's SHA-256 to its place in `entries`.
    by_hash: HashMap<[u8; 32], usize>,
}

/// One token of the file.
struct Token {
    name: String,
    kinds: Vec<Kind>,
    nonces_per_second: NonZeroU32,
    limiter: DefaultDirectRateLimiter,
}

/// The file as written.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct TokensFile {
    #[serde(default)]
    token: Vec<toml::Table>,
}

/// One `[[token]]` table as written.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct TokenEntry {
    name: String,
    sha256: String,
    #[serde(default)]
    kinds: Option<Vec<String>>,
    nonces_per_second: u32,
}

impl Tokens {
    /// No tokens file: every caller may call, without a rate limit.
    pub fn open() -> Self {
        Self {
            entries: None,
            by_hash: HashMap::new(),
        }
    }

    /// Reads a tokens file; an error is one line naming the file, the entry and the fix.
    pub fn load(path: &Path) -> Result<Self, String> {
        let at = format!("--tokens-file {}", path.display());
        let text = std::fs::read_to_string(path).map_err(|e| {
            format!("cannot read {at}: {e}: give the path of a TOML file of [[token]] entries")
        })?;
        let file: TokensFile = toml::from_str(&text).map_err(|e| {
            let line = e
                .span()
                .map(|span| format!(" line {}:", line_of(&text, span.start)))
                .unwrap_or_default();
            format!(
                "{at} is not a tokens file:{line} {} (it holds [[token]] tables with name, sha256, kinds and nonces_per_second: docs/serve.md, \"Tokens\")",
                one_line(e.message())
            )
        })?;
        if file.token.is_empty() {
            return Err(format!(
                "{at} holds no [[token]] entries: add one (name, sha256, nonces_per_second), or start without --tokens-file to let anyone call"
            ));
        }
        let mut entries = Vec::with_capacity(file.token.len());
        let mut by_hash = HashMap::new();
        for (i, table) in file.token.into_iter().enumerate() {
            let entry = match table.get("name").and_then(toml::Value::as_str) {
                Some(name) => format!("{at}: token {} (\"{name}\")", i + 1),
                None => format!("{at}: token {}", i + 1),
            };
            let raw = TokenEntry::deserialize_table(table)
                .map_err(|e| format!("{entry}: {}", one_line(&e)))?;
            let token = Token::from_entry(&raw).map_err(|e| format!("{entry}: {e}"))?;
            if let Some(other) = entries.iter().find(|t: &&Token| t.name == token.name) {
                return Err(format!(
                    "{entry}: the name \"{}\" is taken by another token: give each token a name of its own",
                    other.name
                ));
            }
            let hash = parse_sha256(&raw.sha256).map_err(|e| format!("{entry}: {e}"))?;
            if by_hash.insert(hash, i).is_some() {
                return Err(format!(
                    "{entry}: the same sha256 as another token: give each caller a token of its own"
                ));
            }
            entries.push(token);
        }
        Ok(Self {
            entries: Some(entries),
            by_hash,
        })
    }

    /// Whether the caller presenting `authorization` (the header's value) may take `cost`
    /// nonces of `kind` now (`kind` `None`: a call that generates nothing, such as decode).
    pub fn check(
        &self,
        authorization: Option<&[u8]>,
        kind: Option<Kind>,
        cost: u64,
    ) -> Result<(), ApiError> {
        let Some(entries) = &self.entries else {
            return Ok(());
        };
        let presented = bearer(authorization)?;
        let hash: [u8; 32] = Sha256::digest(presented).into();
        let token = self
            .by_hash
            .get(&hash)
            .map(|&i| &entries[i])
            .ok_or_else(|| {
                ApiError::new(
                    401,
                    "unauthorized",
                    "the bearer token is not one this server accepts: send a token its operator issued",
                )
            })?;
        let Some(kind) = kind else {
            return Ok(());
        };
        if !token.kinds.contains(&kind) {
            let allowed: Vec<&str> = token.kinds.iter().map(|k| k.name()).collect();
            return Err(ApiError::new(
                403,
                "forbidden",
                format!(
                    "token \"{}\" may not take {} nonces (it may take {}): use a token allowed {} nonces",
                    token.name,
                    kind.name(),
                    allowed.join(", "),
                    kind.name()
                ),
            ));
        }
        token.take(cost)
    }
}

impl TokenEntry {
    fn deserialize_table(table: toml::Table) -> Result<Self, String> {
        if let Some(rate) = table.get("nonces_per_second")
            && rate.as_integer().is_none_or(|n| u32::try_from(n).is_err())
        {
            let rate = match rate {
                toml::Value::Integer(n) => n.to_string(),
                toml::Value::Float(f) => f.to_string(),
                toml::Value::String(text) => format!("\"{text}\""),
                other => format!("a {}", other.type_str()),
            };
            return Err(format!(
                "nonces_per_second is {rate}: give the token's rate limit as a whole number of nonces per second, up to {}",
                u32::MAX
            ));
        }
        serde::Deserialize::deserialize(toml::Value::Table(table)).map_err(|e: toml::de::Error| {
            let message = one_line(e.message());
            if message.contains("missing field") || message.contains("unknown field") {
                format!(
                    "{message}: a token has name, sha256, nonces_per_second and optionally kinds"
                )
            } else {
                format!(
                    "{message}: name and sha256 are strings, kinds a list of kind names, nonces_per_second a whole number"
                )
            }
        })
    }
}

impl Token {
    fn from_entry(raw: &TokenEntry) -> Result<Self, String> {
        if raw.name.trim().is_empty() {
            return Err(
                "name is empty: give the token a name to tell it by in errors and metrics".into(),
            );
        }
        let kinds = match &raw.kinds {
            None => Kind::ALL.to_vec(),
            Some(names) if names.is_empty() => {
                return Err(
                    "kinds is empty, so the token could take nothing: list the kinds it may take, or leave kinds out for all"
                        .into(),
                );
            }
            Some(names) => names
                .iter()
                .map(|name| parse_kind(name).map_err(|e| format!("kinds: {}", e.message)))
                .collect::<Result<Vec<_>, _>>()?,
        };
        let nonces_per_second = NonZeroU32::new(raw.nonces_per_second).ok_or(
            "nonces_per_second is 0, so the token could take nothing: give its rate limit in nonces per second",
        )?;
        Ok(Self {
            name: raw.name.clone(),
            kinds,
            nonces_per_second,
            limiter: RateLimiter::direct(Quota::per_second(nonces_per_second)),
        })
    }

    /// Takes `cost` nonces from the token's rate limit, or says how long to wait.
    fn take(&self, cost: u64) -> Result<(), ApiError> {
        let Some(cells) = u32::try_from(cost).ok().and_then(NonZeroU32::new) else {
            if cost == 0 {
                return Ok(());
            }
            return Err(self.over_burst(cost));
        };
        match self.limiter.check_n(cells) {
            Ok(Ok(())) => Ok(()),
            Ok(Err(not_until)) => {
                super::metrics::count_rate_limited();
                let wait = not_until.wait_time_from(self.limiter.clock().now());
                // Retry-After takes whole seconds: rounded up, a retry then never comes early.
                let seconds = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
                Err(ApiError {
                    retry_after: Some(seconds.max(1)),
                    ..ApiError::new(
                        429,
                        "rate_limited",
                        format!(
                            "token \"{}\" is over its rate of {} nonces per second: retry in {:.3} s",
                            self.name,
                            self.nonces_per_second,
                            wait.as_secs_f64()
                        ),
                    )
                })
            }
            Err(_) => Err(self.over_burst(cost)),
        }
    }

    /// A request for more nonces than the token's burst: it could never pass, so it is
    /// refused as forbidden (403), not as "wait" (429), which clients retry.
    fn over_burst(&self, cost: u64) -> ApiError {
        super::metrics::count_rate_limited();
        ApiError::new(
            403,
            "over_token_limit",
            format!(
                "{cost} nonces is more than token \"{}\" may take at once ({} a second): ask for at most {} per request",
                self.name, self.nonces_per_second, self.nonces_per_second
            ),
        )
    }
}

/// The token of an `Authorization: Bearer TOKEN` header.
fn bearer(authorization: Option<&[u8]>) -> Result<&[u8], ApiError> {
    let Some(value) = authorization else {
        return Err(ApiError::new(
            401,
            "unauthorized",
            format!("a bearer token is needed: {HOW_TO_SEND}"),
        ));
    };
    // The scheme is case-insensitive (RFC 9110, 11.1); the token is taken as it is.
    let token = value
        .get(..7)
        .filter(|scheme| scheme.eq_ignore_ascii_case(b"bearer "))
        .map(|_| value[7..].trim_ascii())
        .filter(|token| !token.is_empty());
    token.ok_or_else(|| {
        ApiError::new(
            401,
            "unauthorized",
            format!("the Authorization header is not a bearer token: {HOW_TO_SEND}"),
        )
    })
}

/// A token's `sha256`: 64 hex digits.
fn parse_sha256(text: &str) -> Result<[u8; 32], String> {
    let mut out = [0u8; 32];
    hex::decode_to_slice(text.trim(), &mut out).map_err(|_| {
        format!(
            "sha256 is not 64 hex digits: give the token's SHA-256 in hex ({HOW_TO_HASH}), never the token itself"
        )
    })?;
    Ok(out)
}

/// The 1-based line of byte `offset` in `text`.
fn line_of(text: &str, offset: usize) -> usize {
    text.as_bytes()[..offset.min(text.len())]
        .iter()
        .filter(|&&b| b == b'\n')
        .count()
        + 1
}

/// A parser's message on one line.
fn one_line(message: &str) -> String {
    message.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tokens(text: &str) -> Result<Tokens, String> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tokens.toml");
        std::fs::write(&path, text).unwrap();
        Tokens::load(&path)
    }

    fn sha(token: &str) -> String {
        hex::encode(Sha256::digest(token.as_bytes()))
    }

    fn file(rate: u32, kinds: &str) -> String {
        format!(
            "[[token]]\nname = \"app\"\nsha256 = \"{}\"\n{kinds}\nnonces_per_second = {rate}\n",
            sha("secret")
        )
    }

    #[test]
    fn a_known_token_passes_and_others_are_refused() {
        let t = tokens(&file(1000, "")).unwrap();
        assert_eq!(
            t.check(Some(b"Bearer secret"), Some(Kind::Counter), 1),
            Ok(())
        );
        assert_eq!(t.check(Some(b"bearer secret"), None, 0), Ok(()));
        for (header, what) in [
            (None, "a bearer token is needed"),
            (Some(&b"Basic c2VjcmV0"[..]), "not a bearer token"),
            (Some(&b"Bearer "[..]), "not a bearer token"),
            (Some(&b"Bearer wrong"[..]), "not one this server accepts"),
        ] {
            let e = t.check(header, Some(Kind::Counter), 1).unwrap_err();
            assert_eq!(e.status, 401);
            assert!(e.message.contains(what), "{}", e.message);
        }
    }

    #[test]
    fn kinds_are_enforced_by_name() {
        let t = tokens(&file(1000, "kinds = [\"counter\"]")).unwrap();
        assert_eq!(
            t.check(Some(b"Bearer secret"), Some(Kind::Counter), 1),
            Ok(())
        );
        let e = t
            .check(Some(b"Bearer secret"), Some(Kind::Sortable), 1)
            .unwrap_err();
        assert_eq!(e.status, 403);
        assert!(e.message.contains("\"app\"") && e.message.contains("sortable"));
        // Decode needs the token but no kind.
        assert_eq!(t.check(Some(b"Bearer secret"), None, 0), Ok(()));
    }

    #[test]
    fn the_rate_is_a_burst_of_one_second_then_a_wait() {
        let t = tokens(&file(100, "")).unwrap();
        assert_eq!(
            t.check(Some(b"Bearer secret"), Some(Kind::Counter), 100),
            Ok(())
        );
        let e = t
            .check(Some(b"Bearer secret"), Some(Kind::Counter), 100)
            .unwrap_err();
        assert_eq!((e.status, e.code), (429, "rate_limited"));
        assert_eq!(e.retry_after, Some(1));
        let e = t
            .check(Some(b"Bearer secret"), Some(Kind::Counter), 101)
            .unwrap_err();
        assert_eq!(
            (e.status, e.code, e.retry_after),
            (403, "over_token_limit", None)
        );
        assert!(e.message.contains("at most 100"), "{}", e.message);
        let e = t
            .check(Some(b"Bearer secret"), Some(Kind::Counter), u64::MAX)
            .unwrap_err();
        assert_eq!(e.code, "over_token_limit");
    }

    #[test]
    fn bad_files_name_the_entry_and_the_fix() {
        let good = sha("secret");
        for (text, expected) in [
            ("[[token]\n".to_owned(), "line 1"),
            ("".to_owned(), "holds no [[token]] entries"),
            ("tokens = 1\n".to_owned(), "unknown field"),
            (
                "[[token]]\nname = \"a\"\nsha256 = \"xyz\"\nnonces_per_second = 1\n".to_owned(),
                "token 1 (\"a\"): sha256 is not 64 hex digits",
            ),
            (
                format!("[[token]]\nname = \"a\"\nsha256 = \"{good}\"\n"),
                "token 1 (\"a\"): missing field `nonces_per_second`",
            ),
            (
                format!(
                    "[[token]]\nname = \"a\"\nsha256 = \"{good}\"\nkinds = [\"uuid\"]\nnonces_per_second = 1\n"
                ),
                "kinds: unknown kind \"uuid\"",
            ),
            (
                format!("[[token]]\nname = \"a\"\nsha256 = \"{good}\"\nnonces_per_second = 0\n"),
                "nonces_per_second is 0",
            ),
            (
                format!("[[token]]\nname = \"a\"\nsha256 = \"{good}\"\nnonces_per_second = -5\n"),
                "nonces_per_second is -5: give the token's rate limit as a whole number",
            ),
            (
                format!("[[token]]\nname = 7\nsha256 = \"{good}\"\nnonces_per_second = 5\n"),
                "token 1: invalid type: integer `7`, expected a string: name and sha256 are strings",
            ),
            (
                format!(
                    "[[token]]\nname = \"a\"\nsha256 = \"{good}\"\nnonces_per_second = 1\n[[token]]\nname = \"b\"\nsha256 = \"{good}\"\nnonces_per_second = 1\n"
                ),
                "token 2 (\"b\"): the same sha256",
            ),
        ] {
            let e = tokens(&text).err().unwrap();
            assert!(e.contains(expected), "{text:?}: {e}");
            assert!(e.contains("--tokens-file"), "{e}");
            assert_eq!(e.lines().count(), 1, "{e}");
        }
    }
}
