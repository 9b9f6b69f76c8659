//! What the machine asks of its driver: the next call or wait ([`Action`]), the effects to
//! apply in order ([`Effect`]), and the labels telemetry gives the calls.

use std::sync::Arc;
use std::time::Duration;

use lease_core::{ErrorKind, MachineId};

use super::{AcquireError, LeaseEvent, LossReason};
use crate::cache::CachedLease;

/// Why a lease operation was started (telemetry `source`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Source {
    /// Startup acquisition (and the release of a grant it refused).
    Initial,
    /// Acquisition after a loss (and the release of the lost lease before it).
    Reacquire,
    /// Renewal of a cached lease after a manager restart.
    Cache,
    /// Regular or retried renewal.
    Scheduled,
    /// Release on shutdown.
    Shutdown,
}

/// The lowercase label of each variant, `as_str`.
macro_rules! labels {
    ($ty:ident { $($variant:ident => $label:literal),* }) => {
        impl $ty {
            /// Lowercase label.
            #[must_use]
            pub const fn as_str(self) -> &'static str {
                match self {
                    $(Self::$variant => $label),*
                }
            }
        }
    };
}

labels!(Source { Initial => "initial", Reacquire => "reacquire", Cache => "cache",
    Scheduled => "scheduled", Shutdown => "shutdown" });

/// A strategy operation (telemetry `operation`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Operation {
    /// [`Strategy::acquire`](lease_core::Strategy::acquire).
    Acquire,
    /// [`Strategy::renew`](lease_core::Strategy::renew).
    Renew,
    /// [`Strategy::release`](lease_core::Strategy::release).
    Release,
}

labels!(Operation { Acquire => "acquire", Renew => "renew", Release => "release" });

/// Outcome of an operation (telemetry `result`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OpResult {
    /// Succeeded.
    Ok,
    /// Failed.
    Error,
    /// Failed with an uncertain outcome.
    Retry,
    /// The lease is lost (confirmed by the coordinator, or an illegal TTL).
    Lost,
}

labels!(OpResult { Ok => "ok", Error => "error", Retry => "retry", Lost => "lost" });

impl OpResult {
    pub(super) fn of(kind: ErrorKind) -> Self {
        match kind {
            ErrorKind::Lost => Self::Lost,
            ErrorKind::Retry => Self::Retry,
            _ => Self::Error,
        }
    }
}

/// Something the driver must apply, in order.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum Effect<L> {
    /// (Re)enable every factory with `machine_id`, generating only while `now < deadline_ms`.
    EnableFactories {
        /// The leased ID.
        machine_id: MachineId,
        /// Every timestamp must be strictly above this floor (the floors' terms, see
        /// `LeaseTarget`): earlier holders of the ID may have issued timestamps up to it. 0 when
        /// the strategy stores no floor.
        floor_ms: u64,
        /// Exclusive local deadline.
        deadline_ms: u64,
    },
    /// Set the factories' deadline (after a renewal; it can also move earlier).
    ExtendDeadline {
        /// Exclusive local deadline.
        deadline_ms: u64,
    },
    /// Disable every factory now (idempotent).
    DisableFactories,
    /// Call the application's `on_lease_lost` callback. Always preceded by `DisableFactories`.
    LeaseLost {
        /// Why.
        reason: LossReason,
        /// How long the local deadline still had to run, in ms.
        remaining_ttl_ms: u64,
    },
    /// Remember this lease in the [`LeaseCache`](crate::LeaseCache).
    StoreCache(CachedLease<L>),
    /// Empty the lease cache.
    ClearCache,
    /// Telemetry.
    Event(LeaseEvent),
}

/// What the driver should do next.
#[derive(Debug)]
#[non_exhaustive]
pub enum Action<L> {
    /// Call [`Strategy::acquire`](lease_core::Strategy::acquire)
    /// `(requested, now_ms, floor_ms)`, giving up after `timeout`, then report with
    /// [`LeaseMachine::on_acquire_result`](crate::LeaseMachine::on_acquire_result).
    Acquire {
        /// Why.
        source: Source,
        /// Lease duration to ask for.
        requested: Duration,
        /// Longest the call may take.
        timeout: Duration,
        /// This node's clock when the call is sent: free IDs whose floor is below it are preferred.
        now_ms: u64,
        /// The floor to record with the claimed ID: the latest local deadline this grant can
        /// give (`now + requested - margin`), so it bounds every timestamp issued under it.
        floor_ms: u64,
    },
    /// Call [`Strategy::renew`](lease_core::Strategy::renew)
    /// `(lease, requested, floor_ms)`, giving up after `timeout`, then report with
    /// [`LeaseMachine::on_renew_result`](crate::LeaseMachine::on_renew_result).
    Renew {
        /// The lease to renew.
        lease: Arc<L>,
        /// Why.
        source: Source,
        /// Lease duration to ask for.
        requested: Duration,
        /// Longest the call may take; never beyond the local deadline.
        timeout: Duration,
        /// The floor to record: the latest local deadline this renewal can give.
        floor_ms: u64,
    },
    /// Call [`Strategy::release`](lease_core::Strategy::release)
    /// `(lease, guard, floor)`, giving up after `timeout`, then report with
    /// [`LeaseMachine::on_release_result`](crate::LeaseMachine::on_release_result).
    ///
    /// `floor` is the larger of `floor_ms` and every target's
    /// [`issued_up_to_ms`](crate::LeaseTarget::issued_up_to_ms), read after the targets were
    /// disabled: the exact bound of what was issued under the ID.
    Release {
        /// The lease to release.
        lease: Arc<L>,
        /// How long the ID must stay blocked after the release.
        guard: Duration,
        /// Longest the call may take.
        timeout: Duration,
        /// The floor the lease was granted with: the release never records less.
        floor_ms: u64,
    },
    /// Nothing to do before `until` (ms) unless an outside event arrives; poll again then.
    Wait {
        /// When to poll again.
        until: u64,
    },
    /// The lease was lost and the strategy is deterministic: nothing more happens until shutdown.
    Halted,
    /// Startup failed.
    Failed(AcquireError),
    /// Shut down; the machine is finished.
    Stopped,
}
