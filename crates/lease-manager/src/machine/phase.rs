//! The machine's private state: which phase of the lifecycle it is in, the lease it holds and
//! the call it waits for.

use std::sync::Arc;
use std::time::Duration;

use lease_core::MachineId;
use lease_core::time::millis;

use crate::Failure;

use super::{AcquireError, Source};
use crate::cache::CachedLease;

/// An outstanding strategy call: when it was sent and how long it may take.
#[derive(Debug, Clone, Copy)]
pub(super) struct InFlight {
    pub(super) sent: u64,
    pub(super) timeout: Duration,
}

impl InFlight {
    pub(super) fn expires(self) -> u64 {
        self.sent.saturating_add(millis(self.timeout))
    }
}

/// The lease held, as the machine keeps it.
#[derive(Debug)]
pub(super) struct Held<L> {
    pub(super) machine_id: MachineId,
    pub(super) lease: Arc<L>,
    pub(super) deadline: u64,
    pub(super) ttl: Duration,
    /// The floor the lease was granted with (the floors' terms), or, resumed from the cache,
    /// what earlier factories issued under it if that is higher: the targets start above it.
    pub(super) floor_ms: u64,
    /// The coordinator's clock at the last grant or renewal, with when that call was sent.
    pub(super) coordinator: Option<CoordinatorReading>,
}

/// A coordinator clock reading and the local instant its request was sent (it was applied no
/// earlier than that).
#[derive(Debug, Clone, Copy)]
pub(super) struct CoordinatorReading {
    pub(super) sent: u64,
    pub(super) coordinator_ms: u64,
}

impl CoordinatorReading {
    /// The reading a reply to a call sent at `sent` carried, if any.
    pub(super) fn of(sent: u64, coordinator_ms: Option<u64>) -> Option<Self> {
        coordinator_ms.map(|coordinator_ms| Self {
            sent,
            coordinator_ms,
        })
    }
}

/// Where a held lease is in its renewal cycle.
#[derive(Debug, Clone, Copy)]
pub(super) enum RenewStep {
    Idle {
        at: u64,
    },
    InFlight {
        call: InFlight,
        source: Source,
        failures: u32,
    },
    Backoff {
        at: u64,
        failures: u32,
    },
}

/// The phase of the lease lifecycle (the diagram in the module docs).
#[derive(Debug)]
pub(super) enum Phase<L> {
    New {
        cached: Option<CachedLease<L>>,
    },
    Recovering {
        cached: CachedLease<L>,
        call: Option<InFlight>,
    },
    Acquiring {
        source: Source,
        attempts: u32,
        next_at: u64,
        call: Option<InFlight>,
        last_error: Option<Failure>,
    },
    Held {
        held: Held<L>,
        step: RenewStep,
    },
    /// Giving `lease` back, then going on with `then`: `Stopped` on shutdown; or acquisition
    /// after a refused grant (illegal TTL, arrived too late), which must not keep its ID
    /// blocked for a whole lease, or after a loss, so that the floor of what was issued reaches
    /// a coordinator that forgot the lease.
    Releasing {
        lease: Arc<L>,
        floor_ms: u64,
        call: Option<InFlight>,
        then: Box<Phase<L>>,
    },
    Halted,
    Failed(AcquireError),
    Stopped,
}

impl<L> Phase<L> {
    /// Acquiring for `source` from `now`, no attempt made yet.
    pub(super) const fn acquiring(source: Source, now: u64, last_error: Option<Failure>) -> Self {
        Self::Acquiring {
            source,
            attempts: 0,
            next_at: now,
            call: None,
            last_error,
        }
    }

    /// Giving `lease` back with `floor_ms`, then going on with `then`.
    pub(super) fn releasing(lease: Arc<L>, floor_ms: u64, then: Self) -> Self {
        Self::Releasing {
            lease,
            floor_ms,
            call: None,
            then: Box::new(then),
        }
    }

    /// The lease held or being recovered: its handle and the floor it is released with, and
    /// its deadline.
    pub(super) fn lease(&self) -> Option<((Arc<L>, u64), u64)> {
        match self {
            Self::Held { held, .. } => {
                Some(((Arc::clone(&held.lease), held.floor_ms), held.deadline))
            }
            Self::Recovering { cached, .. } => {
                let lease = (Arc::clone(&cached.lease), cached.resume_floor_ms());
                Some((lease, cached.deadline_ms))
            }
            _ => None,
        }
    }

    /// The call outstanding outside a held lease.
    pub(super) const fn outstanding(&self) -> Option<InFlight> {
        match self {
            Self::Recovering { call, .. }
            | Self::Acquiring { call, .. }
            | Self::Releasing { call, .. } => *call,
            _ => None,
        }
    }
}
