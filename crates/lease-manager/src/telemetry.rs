//! `tracing` and `metrics` output for the driver, mirroring the reference events. Each part is
//! compiled only with its feature; without them every call here is a no-op.

// With only one of the two features, some parameters feed only the other one.
#![cfg_attr(
    not(all(feature = "tracing", feature = "metrics")),
    allow(unused_variables)
)]

use crate::machine::{
    LeaseEvent, LeaseState, LossReason, Operation, OperationEvent, RetryEvent, Source,
};

/// The span of one strategy call; results are recorded into it when they arrive.
#[derive(Debug, Clone, Default)]
pub(crate) struct OpSpan {
    #[cfg(feature = "tracing")]
    span: Option<tracing::Span>,
}

impl OpSpan {
    pub(crate) fn new(strategy: &'static str, operation: Operation, source: Source) -> Self {
        #[cfg(feature = "tracing")]
        {
            use tracing::field::Empty;
            // A span's name must be a literal: one per operation, the same fields.
            macro_rules! span {
                ($name:literal) => {
                    tracing::info_span!(
                        $name,
                        strategy,
                        source = source.as_str(),
                        result = Empty,
                        ttl_ms = Empty,
                        machine_id = Empty
                    )
                };
            }
            let span = match operation {
                Operation::Acquire => span!("lease.acquire"),
                Operation::Renew => span!("lease.renew"),
                Operation::Release => span!("lease.release"),
            };
            Self { span: Some(span) }
        }
        #[cfg(not(feature = "tracing"))]
        Self {}
    }
}

/// Reports a machine event; `span` is the span of the call the event concludes.
pub(crate) fn event(strategy: &'static str, event: &LeaseEvent, span: &OpSpan) {
    match event {
        LeaseEvent::Operation(op) => operation(strategy, op, span),
        LeaseEvent::Retry(retry) => self::retry(strategy, retry),
        LeaseEvent::FloorAhead {
            machine_id,
            floor_ms,
            ahead_ms,
        } => floor_ahead(strategy, machine_id.get(), *floor_ms, *ahead_ms),
    }
}

/// A granted ID whose floor is ahead of our clock: sortable nonces wait until the clock passes
/// it, so a long wait is said once, with the ID and how far, instead of stalling silently.
fn floor_ahead(strategy: &'static str, machine_id: u16, floor_ms: u64, ahead_ms: u64) {
    #[cfg(feature = "tracing")]
    if ahead_ms > 1000 {
        tracing::warn!(
            strategy,
            machine_id,
            floor_ms,
            ahead_ms,
            "machine id {machine_id} was last used up to {ahead_ms} ms ahead of this node's clock \
             (a clock behind its previous holder's): counter nonces start above that floor at \
             once, sortable nonces wait until this clock passes it; check this node's time sync"
        );
    } else {
        tracing::debug!(
            strategy,
            machine_id,
            floor_ms,
            ahead_ms,
            "lease floor ahead of the clock"
        );
    }
    #[cfg(feature = "metrics")]
    {
        #[allow(clippy::cast_precision_loss)] // far below 2^52 ms
        metrics::histogram!("nononce_lease_floor_ahead_seconds", "strategy" => strategy)
            .record(ahead_ms as f64 / 1000.0);
    }
}

fn operation(strategy: &'static str, op: &OperationEvent, span: &OpSpan) {
    #[cfg(feature = "tracing")]
    {
        let log = || match &op.error {
            None => tracing::info!(
                strategy,
                operation = op.operation.as_str(),
                source = op.source.as_str(),
                result = op.result.as_str(),
                ttl_ms = op.ttl_ms,
                latency_ms = op.latency_ms,
                "lease operation finished"
            ),
            Some(error) => tracing::warn!(
                strategy,
                operation = op.operation.as_str(),
                source = op.source.as_str(),
                result = op.result.as_str(),
                kind = error.kind.as_str(),
                reason = %error.reason,
                latency_ms = op.latency_ms,
                "lease operation failed"
            ),
        };
        match &span.span {
            Some(s) => {
                s.record("result", op.result.as_str());
                if let Some(ttl) = op.ttl_ms {
                    s.record("ttl_ms", ttl);
                }
                if let Some(id) = op.machine_id {
                    s.record("machine_id", id.get());
                }
                s.in_scope(log);
            }
            None => log(),
        }
    }
    #[cfg(feature = "metrics")]
    {
        metrics::counter!(
            "nononce_lease_operations_total",
            "strategy" => strategy,
            "operation" => op.operation.as_str(),
            "source" => op.source.as_str(),
            "result" => op.result.as_str()
        )
        .increment(1);
        #[allow(clippy::cast_precision_loss)] // latencies are far below 2^52 ms
        metrics::histogram!(
            "nononce_lease_operation_duration_seconds",
            "strategy" => strategy,
            "operation" => op.operation.as_str()
        )
        .record(op.latency_ms as f64 / 1000.0);
    }
}

fn retry(strategy: &'static str, retry: &RetryEvent) {
    #[cfg(feature = "tracing")]
    tracing::info!(
        strategy,
        operation = retry.operation.as_str(),
        attempt = retry.attempt,
        delay_ms = retry.delay_ms,
        reason = %retry.reason,
        "lease retry scheduled"
    );
    #[cfg(feature = "metrics")]
    metrics::counter!(
        "nononce_lease_retries_total",
        "strategy" => strategy,
        "operation" => retry.operation.as_str()
    )
    .increment(1);
}

/// The lease was lost.
pub(crate) fn lost(strategy: &'static str, reason: &LossReason, remaining_ttl_ms: u64) {
    #[cfg(feature = "tracing")]
    tracing::error!(strategy, reason = %reason, remaining_ttl_ms, "machine id lease lost");
    #[cfg(feature = "metrics")]
    metrics::counter!("nononce_lease_lost_total", "strategy" => strategy).increment(1);
}

/// A strategy call panicked; the manager restarts from its cache.
pub(crate) fn panicked(strategy: &'static str, message: &str) {
    #[cfg(feature = "tracing")]
    tracing::error!(
        strategy,
        panic = message,
        "lease strategy panicked; restarting from the lease cache"
    );
    #[cfg(feature = "metrics")]
    metrics::counter!("nononce_lease_panics_total", "strategy" => strategy).increment(1);
}

/// Gauges: whether a lease is held, its ID and the seconds left to the local deadline.
pub(crate) fn gauges(strategy: &'static str, state: &LeaseState, now_ms: u64) {
    #[cfg(feature = "metrics")]
    {
        #[allow(clippy::cast_precision_loss)] // ms values far below 2^52
        let (held, id, left) = match state {
            LeaseState::Held {
                machine_id,
                deadline_ms,
            } => (
                1.0,
                f64::from(machine_id.get()),
                deadline_ms.saturating_sub(now_ms) as f64 / 1000.0,
            ),
            _ => (0.0, -1.0, 0.0),
        };
        metrics::gauge!("nononce_lease_held", "strategy" => strategy).set(held);
        metrics::gauge!("nononce_lease_machine_id", "strategy" => strategy).set(id);
        metrics::gauge!("nononce_lease_seconds_to_local_expiry", "strategy" => strategy).set(left);
    }
}
