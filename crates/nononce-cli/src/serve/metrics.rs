//! `/metrics`: Prometheus text, through the `metrics` facade and its Prometheus exporter.
//!
//! | metric | labels | what |
//! |---|---|---|
//! | `nononce_requests_total` | `operation`, `status` | requests answered, by outcome |
//! | `nononce_request_seconds` | `operation` | time to answer (summary) |
//! | `nononce_nonces_total` | `kind`, `bits` | nonces handed out (a range counts its length) |
//! | `nononce_lease_held` | `kind` | 1 while the kind's factory may generate, else 0 |
//! | `nononce_lease_seconds_left` | `kind` | time until the kind's lease deadline (0 without) |
//! | `nononce_generation_seconds` | `kind`, `bits` | time a request spent generating, waits for the clock included (summary) |
//! | `nononce_lease_waits_total` | `kind` | requests refused because the kind held no lease (503) |
//! | `nononce_rate_limited_total` | | requests refused by a token's rate limit |
//!
//! Beside them, each kind's factory's generation counts, published by the facade under the
//! label `factory` (the kind's name): `nononce_factory_nonces_total`,
//! `nononce_factory_throttled_total`, `nononce_factory_kind_conflicts_total` and
//! `nononce_factory_deadline_refusals_total` (docs/operations.md).

use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};

use crate::codec::Kind;

/// How often the recorder's timing samples are folded into its summaries.
const UPKEEP: std::time::Duration = std::time::Duration::from_secs(5);

/// The process's metrics.
pub struct Metrics {
    handle: PrometheusHandle,
}

impl Metrics {
    /// Installs the process's recorder, and its upkeep on the current runtime.
    pub fn install() -> Result<Self, String> {
        let handle = PrometheusBuilder::new()
            .install_recorder()
            .map_err(|e| format!("cannot start the metrics recorder: {e}"))?;
        // The recorder keeps every timing sample until upkeep folds it into the summaries;
        // without it a server nobody scrapes grows by about 20 bytes a request, and the first
        // scrape after a million requests took a fifth of a second.
        let upkeep = handle.clone();
        tokio::spawn(async move {
            let mut every = tokio::time::interval(UPKEEP);
            loop {
                every.tick().await;
                upkeep.run_upkeep();
            }
        });
        Ok(Self { handle })
    }

    /// Counts `n` nonces handed out.
    pub fn nonces(&self, kind: Kind, bits: u16, n: u64) {
        metrics::counter!("nononce_nonces_total", "kind" => kind.name(), "bits" => bits_label(bits))
            .increment(n);
    }

    /// Records the time one request spent generating: 64-bit counter nonces wait for the
    /// clock past 8,192 per millisecond, sortable ones past their per-millisecond limit.
    pub fn generated(&self, kind: Kind, bits: u16, seconds: f64) {
        metrics::histogram!("nononce_generation_seconds", "kind" => kind.name(), "bits" => bits_label(bits))
            .record(seconds);
    }

    /// Counts a request refused for want of a lease.
    pub fn lease_wait(&self, kind: Kind) {
        metrics::counter!("nononce_lease_waits_total", "kind" => kind.name()).increment(1);
    }

    /// Counts an answered request.
    pub fn request(&self, operation: &'static str, status: u16, seconds: f64) {
        metrics::counter!("nononce_requests_total", "operation" => operation, "status" => status.to_string())
            .increment(1);
        metrics::histogram!("nononce_request_seconds", "operation" => operation).record(seconds);
    }

    /// Counts a request refused by a rate limit.
    pub fn rate_limited(&self) {
        count_rate_limited();
    }

    /// The text exposition, with each kind's lease state as of now.
    pub fn render(&self, leases: &[(Kind, Option<f64>)]) -> String {
        for &(kind, left) in leases {
            metrics::gauge!("nononce_lease_held", "kind" => kind.name()).set(if left.is_some() {
                1.0
            } else {
                0.0
            });
            metrics::gauge!("nononce_lease_seconds_left", "kind" => kind.name())
                .set(left.unwrap_or(0.0));
        }
        self.handle.render()
    }
}

/// Counts a request refused by a rate limit, for the token check, which every transport calls
/// and which holds no [`Metrics`].
pub fn count_rate_limited() {
    metrics::counter!("nononce_rate_limited_total").increment(1);
}

const fn bits_label(bits: u16) -> &'static str {
    match bits {
        64 => "64",
        96 => "96",
        _ => "128",
    }
}
