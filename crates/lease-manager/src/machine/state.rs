//! What the machine tells about itself: its state, why a lease ended, why startup failed.

use std::fmt;

use lease_core::MachineId;

use crate::Failure;

/// Why the node stopped using its machine ID.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum LossReason {
    /// The coordinator confirmed the lease is no longer ours.
    Lost(String),
    /// A grant's TTL was below the configured minimum.
    IllegalTtl {
        /// The granted TTL in ms.
        ttl_ms: u64,
        /// The configured minimum in ms.
        min_ttl_ms: u64,
    },
    /// The local deadline passed without a successful renewal (or the clock jumped past it).
    LocalExpiry,
    /// An outside signal, for example a conflict guard that found another node with our ID.
    External(String),
    /// The coordinator's clock moved forward between two grants by more than this node's own
    /// elapsed time plus the margin allows: leases on it may expire early, so another node may
    /// be handed this ID before our local deadline.
    CoordinatorClockJump {
        /// How far the coordinator's clock ran ahead of this node's elapsed time, in ms.
        ahead_ms: u64,
        /// The margin it exceeded, in ms.
        margin_ms: u64,
    },
    /// This node's clock may be further from the coordinator's than the strategy allows
    /// ([`Grant::max_clock_offset`](lease_core::Grant::max_clock_offset)): a successor's floor
    /// could not cover what it issued.
    ClockOffset {
        /// Whether this node's clock is ahead of the coordinator's (else behind).
        ahead: bool,
        /// By how much, in ms, counting the call's round trip against the node.
        offset_ms: u64,
        /// The allowed offset, in ms.
        max_ms: u64,
    },
}

impl fmt::Display for LossReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Lost(reason) => write!(f, "lease lost: {reason}"),
            Self::IllegalTtl { ttl_ms, min_ttl_ms } => {
                write!(
                    f,
                    "illegal ttl: {ttl_ms} ms is below the minimum of {min_ttl_ms} ms"
                )
            }
            Self::LocalExpiry => f.write_str("local lease deadline passed"),
            Self::External(reason) => write!(f, "external signal: {reason}"),
            Self::CoordinatorClockJump {
                ahead_ms,
                margin_ms,
            } => write!(
                f,
                "the coordinator's clock jumped {ahead_ms} ms ahead of this node's elapsed time \
                 (more than the {margin_ms} ms margin), so leases on it may expire early; the \
                 lease is treated as lost: check the coordinator's time synchronisation"
            ),
            Self::ClockOffset {
                ahead,
                offset_ms,
                max_ms,
            } => write!(
                f,
                "this node's clock is {offset_ms} ms {} the coordinator's (the call's round \
                 trip included), more than the {max_ms} ms the store's settings allow \
                 (max_clock_offset): synchronise this node's clock (NTP), or raise \
                 max_clock_offset for every node of the store, which lengthens its amnesia \
                 hold-off by twice the increase",
                if *ahead { "ahead of" } else { "behind" }
            ),
        }
    }
}

/// Startup could not acquire a lease.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AcquireError {
    /// The acquire timeout passed.
    #[error("no machine id lease acquired within {waited_ms} ms ({attempts} attempts)")]
    Timeout {
        /// How long startup waited.
        waited_ms: u64,
        /// How many acquire calls were made.
        attempts: u32,
        /// The last failure, if any.
        #[source]
        last_error: Option<Failure>,
    },
    /// The strategy reported an error that retrying cannot fix (unsupported or misconfigured).
    #[error("strategy cannot acquire a lease")]
    Fatal(#[source] Failure),
}

/// A summary of the machine's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum LeaseState {
    /// Startup: no lease held yet.
    Starting,
    /// Renewing a cached lease after a restart.
    Recovering,
    /// A lease is held and factories may generate until `deadline_ms`.
    Held {
        /// The leased ID.
        machine_id: MachineId,
        /// Exclusive local deadline.
        deadline_ms: u64,
    },
    /// Lost a lease, acquiring a new one.
    Reacquiring,
    /// Lost a deterministic lease; waiting for shutdown.
    Halted,
    /// Releasing on shutdown.
    Releasing,
    /// Finished.
    Stopped,
    /// Startup failed.
    Failed,
}

impl LeaseState {
    /// The machine ID while a lease is held.
    #[must_use]
    pub const fn machine_id(&self) -> Option<MachineId> {
        match self {
            Self::Held { machine_id, .. } => Some(*machine_id),
            _ => None,
        }
    }
}
