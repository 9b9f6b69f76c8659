//! What a request may ask, checked the same way over HTTP and gRPC, and the one error it gets
//! otherwise.

use std::num::NonZeroU64;

use nononce::nonce::Error as NonceError;

use crate::codec::Kind;

/// The most nonces one request returns as a list (a streaming gRPC call takes more).
pub const MAX_COUNT: u64 = 100_000;

/// The most nonces one counter range holds.
pub const MAX_RANGE: u64 = 1_000_000_000;

/// The most nonces one streaming gRPC call returns.
pub const MAX_STREAM: u64 = 1_000_000_000;

/// A request refused or failed: an HTTP status, a stable code, and one sentence saying what
/// went wrong and what to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError {
    pub status: u16,
    pub code: &'static str,
    pub message: String,
    /// When a retry may succeed, in whole seconds (HTTP's Retry-After), when known.
    pub retry_after: Option<u64>,
}

impl ApiError {
    /// An error with no known time to retry.
    pub fn new(status: u16, code: &'static str, message: impl Into<String>) -> Self {
        Self {
            status,
            code,
            message: message.into(),
            retry_after: None,
        }
    }

    /// 400: the request itself is wrong.
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(400, "bad_request", message)
    }

    /// 503: no lease to generate under (yet, or any more).
    pub fn unavailable(message: impl Into<String>) -> Self {
        Self::new(503, "unavailable", message)
    }

    /// What a failed generation means to the caller.
    pub fn generation(kind: Kind, e: &NonceError) -> Self {
        match e {
            NonceError::Disabled | NonceError::LeaseExpired | NonceError::Forked => {
                Self::unavailable(format!(
                    "{} nonces are not available: no machine-id lease is held right now; retry in a few seconds (/readyz says when)",
                    kind.name()
                ))
            }
            NonceError::WouldBlock { .. } => Self::unavailable(format!(
                "{} nonces are momentarily exhausted for this millisecond; retry",
                kind.name()
            )),
            NonceError::TimestampOverflow => Self::unavailable(format!(
                "{} nonces cannot be issued: the 42-bit timestamp has run out from this epoch; restart the server with a later --epoch-ms",
                kind.name()
            )),
            other => Self::new(
                500,
                "internal",
                format!("{} nonces failed: {other}", kind.name()),
            ),
        }
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

/// Reads a parameter named `what` that takes one of `T`'s names (as the command's options
/// take them): `unknown kind "x": use counter, sortable or encrypted` otherwise.
pub fn parse_choice<T: clap::ValueEnum>(what: &str, text: &str) -> Result<T, ApiError> {
    T::from_str(text, false).map_err(|_| {
        let names: Vec<String> = T::value_variants()
            .iter()
            .filter_map(|v| v.to_possible_value().map(|p| p.get_name().to_owned()))
            .collect();
        let listed = match names.split_last() {
            Some((last, [])) => last.clone(),
            Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
            None => String::new(),
        };
        ApiError::bad_request(format!(
            "unknown {what} \"{}\": use {listed}",
            crate::codec::shown(text)
        ))
    })
}

/// Reads a `kind` parameter.
pub fn parse_kind(text: &str) -> Result<Kind, ApiError> {
    parse_choice("kind", text)
}

/// Reads a `bits` parameter.
pub fn parse_bits(text: &str) -> Result<u16, ApiError> {
    match text {
        "64" => Ok(64),
        "96" => Ok(96),
        "128" => Ok(128),
        _ => Err(ApiError::bad_request(format!(
            "bits \"{}\" is not a nonce size: use 64, 96 or 128",
            crate::codec::shown(text)
        ))),
    }
}

/// Reads a `count` parameter: 1 to `max`.
pub fn parse_count(text: &str, max: u64) -> Result<NonZeroU64, ApiError> {
    let out_of_range = || {
        ApiError::bad_request(format!(
            "count must be 1 to {max}, not \"{}\"",
            crate::codec::shown(text)
        ))
    };
    let count: u64 = text.parse().map_err(|_| out_of_range())?;
    check_count(count, max).map_err(|_| out_of_range())
}

/// A count of 1 to `max`.
pub fn check_count(count: u64, max: u64) -> Result<NonZeroU64, ApiError> {
    match NonZeroU64::new(count) {
        Some(n) if count <= max => Ok(n),
        _ => Err(ApiError::bad_request(format!(
            "count must be 1 to {max}, not {count}"
        ))),
    }
}
