//! The operations `serve` offers, whatever the transport: checked requests in, nonces or one
//! clear error out. HTTP (`http.rs`) and gRPC (`grpc.rs`) only translate.

use std::num::NonZeroU64;

use nononce::Decoded;
use nononce::nonce::{CounterRange, Error as NonceError};

use super::auth::Tokens;
use super::metrics::Metrics;
use super::workers::{Workers, time_left};
use crate::codec::{AnyNonce, Input, Kind};

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

/// The service's state: the factories, the epoch nonces are decoded against, who may call.
pub struct Api {
    workers: Workers,
    epoch_ms: u64,
    tokens: Tokens,
    metrics: Metrics,
}

impl Api {
    pub fn new(workers: Workers, epoch_ms: u64, tokens: Tokens, metrics: Metrics) -> Self {
        Self {
            workers,
            epoch_ms,
            tokens,
            metrics,
        }
    }

    pub fn workers(&self) -> &Workers {
        &self.workers
    }

    pub fn tokens(&self) -> &Tokens {
        &self.tokens
    }

    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    pub fn epoch_ms(&self) -> u64 {
        self.epoch_ms
    }

    fn factory(
        &self,
        kind: Kind,
    ) -> Result<&std::sync::Arc<nononce::Factory<nononce::FactoryClock>>, ApiError> {
        self.workers.factory(kind).ok_or_else(|| {
            let served: Vec<&str> = self.workers.all().iter().map(|w| w.kind.name()).collect();
            ApiError::new(
                404,
                "kind_not_served",
                format!(
                    "this server does not serve {} nonces (it serves {}): start it with --kinds including {}",
                    kind.name(),
                    served.join(", "),
                    kind.name()
                ),
            )
        })
    }

    /// `count` nonces of `kind` and `bits`, into `out`. Blocks while 64-bit counter nonces wait
    /// for the clock (8,192 per millisecond): call it off the async threads for large counts.
    pub fn nonces_into(
        &self,
        kind: Kind,
        bits: u16,
        count: NonZeroU64,
        out: &mut Vec<AnyNonce>,
    ) -> Result<(), ApiError> {
        let factory = self.factory(kind)?;
        let started = std::time::Instant::now();
        out.reserve(usize::try_from(count.get()).unwrap_or(usize::MAX));
        for _ in 0..count.get() {
            match crate::codec::next(factory, kind, bits) {
                Ok(nonce) => out.push(nonce),
                Err(e) => return Err(self.failed(kind, &e)),
            }
        }
        self.metrics
            .generated(kind, bits, started.elapsed().as_secs_f64());
        self.metrics.nonces(kind, bits, count.get());
        Ok(())
    }

    /// A failed generation as the caller sees it, counted when it was for want of a lease.
    pub fn failed(&self, kind: Kind, e: &NonceError) -> ApiError {
        let error = ApiError::generation(kind, e);
        if error.status == 503 {
            self.metrics.lease_wait(kind);
        }
        error
    }

    /// `count` nonces of `kind` and `bits`.
    pub fn nonces(
        &self,
        kind: Kind,
        bits: u16,
        count: NonZeroU64,
    ) -> Result<Vec<AnyNonce>, ApiError> {
        let mut out = Vec::new();
        self.nonces_into(kind, bits, count, &mut out)?;
        Ok(out)
    }

    /// A range of `count` consecutive counter nonces of `bits` bits, in one step; a 64-bit
    /// range may hold fewer (it never runs ahead of the clock).
    pub fn range(&self, bits: u16, count: NonZeroU64) -> Result<CounterRange, ApiError> {
        let factory = self.factory(Kind::Counter)?;
        let range = match bits {
            64 => factory.counter_range64(count),
            96 => factory.counter_range96(count),
            _ => factory.counter_range128(count),
        }
        .map_err(|e| self.failed(Kind::Counter, &e))?;
        self.metrics.nonces(Kind::Counter, bits, range.len());
        Ok(range)
    }

    /// The fields of a nonce written as `input` says (the rule of `nononce decode`).
    pub fn decode(
        &self,
        text: &str,
        input: Input,
        bits: Option<u16>,
    ) -> Result<(AnyNonce, Decoded), ApiError> {
        let nonce = AnyNonce::parse(text, input, bits)
            .map_err(|e| ApiError::bad_request(in_api_terms(&e)))?;
        Ok((nonce, nonce.decode(self.epoch_ms)))
    }

    /// Whether every kind may generate now: the first reason it may not, otherwise.
    pub fn ready(&self) -> Result<(), ApiError> {
        for (kind, left) in self.workers.readiness() {
            if let Err(why) = left {
                return Err(ApiError::unavailable(format!("{}: {why}", kind.name())));
            }
        }
        Ok(())
    }

    /// The time each kind's lease still covers, for `/readyz` and the metrics.
    pub fn lease_left(&self) -> Vec<(Kind, Option<f64>)> {
        self.workers
            .all()
            .iter()
            .map(|w| (w.kind, time_left(&w.factory).ok().map(|d| d.as_secs_f64())))
            .collect()
    }
}

/// A decode message of the command (`--input`, `--bits`) in the API's parameter names.
fn in_api_terms(message: &str) -> String {
    message
        .replace("--input base64url", "input=base64url")
        .replace("(--bits)", "(bits)")
}
