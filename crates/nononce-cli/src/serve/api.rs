//! The operations `serve` offers, whatever the transport: checked requests in, nonces or one
//! clear error out. HTTP (`http.rs`) and gRPC (`grpc.rs`) only translate.

use std::num::NonZeroU64;

use nononce::Decoded;
use nononce::nonce::{CounterRange, Error as NonceError};

use super::auth::Tokens;
use super::metrics::Metrics;
use super::request::ApiError;
use super::workers::{Workers, time_left};
use crate::codec::{AnyNonce, Input, Kind};

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
        let nonce = AnyNonce::parse(text, input, bits, self.epoch_ms)
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
    /// Publishes each kind's generation counts now (the facade publishes them every
    /// [`nononce::PUBLISH_INTERVAL`] too), so that a scrape shows them as of its own moment.
    pub fn record_generation_metrics(&self) {
        for worker in self.workers.all() {
            nononce::record_factory_metrics(worker.kind.name(), &worker.factory);
        }
    }

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
        .replace("--input ", "input=")
        .replace("(--bits)", "(bits)")
}
