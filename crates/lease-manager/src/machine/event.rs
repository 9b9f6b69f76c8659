//! Telemetry the machine emits as effects: finished calls, scheduled retries, floors ahead.

use lease_core::MachineId;

use crate::Failure;

use super::{OpResult, Operation, Source};

/// A finished strategy call, for telemetry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OperationEvent {
    /// Which call.
    pub operation: Operation,
    /// Why it was made.
    pub source: Source,
    /// How it ended.
    pub result: OpResult,
    /// The machine ID involved, when known.
    pub machine_id: Option<MachineId>,
    /// The granted TTL in ms, on success.
    pub ttl_ms: Option<u64>,
    /// Time from sending to the result, in ms.
    pub latency_ms: u64,
    /// The failure, when it failed.
    pub error: Option<Failure>,
}

/// A retry was scheduled, for telemetry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetryEvent {
    /// Which call is retried.
    pub operation: Operation,
    /// The number of consecutive failures so far.
    pub attempt: u32,
    /// Delay before the retry, in ms.
    pub delay_ms: u64,
    /// Why the previous call failed.
    pub reason: String,
}

/// Telemetry emitted by the machine.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum LeaseEvent {
    /// A strategy call finished.
    Operation(OperationEvent),
    /// A retry was scheduled.
    Retry(RetryEvent),
    /// A lease was granted whose timestamp floor is ahead of this node's clock: counter nonces
    /// start above it at once, sortable nonces wait until the clock passes it.
    FloorAhead {
        /// The granted ID.
        machine_id: MachineId,
        /// The floor stored with it (the floors' terms, see `LeaseTarget`).
        floor_ms: u64,
        /// How far the floor is ahead of this node's clock, in ms: the floor compared with the
        /// clock's millisecond as it is, which is the floors' terms for targets on the default
        /// epoch; for targets on another epoch the figure is off by the epochs' difference
        /// (the machine does not know its targets' epochs; the driver converts floors).
        ahead_ms: u64,
    },
}
