//! The sans-IO lease state machine: every policy decision of the lease lifecycle, no clock, no I/O.
//!
//! A driver loops: [`LeaseMachine::poll_action`] says what to do now (call the strategy with a
//! timeout, wait until a time, or stop); the driver does it and reports back with
//! `on_*_result`; after every call it drains [`LeaseMachine::poll_effect`] and applies the
//! effects in order (factories on/off, deadline updates, the lease-lost callback, the cache,
//! telemetry). Time is always an input: milliseconds of one monotonic, suspend-aware clock, the
//! same clock the factories check their deadline against.
//!
//! ```text
//!            +-----------+  cached   +------------+  renew ok      +------+
//!   new ---->|  starting |---------->| recovering |--------------->| held |<--+ renew ok
//!            +-----------+           +------------+                +------+   | (extend)
//!                  | no cache              | renew failed:          |  |  |    |
//!                  v                       v disable                |  |  +----+ retry: backoff
//!            +-----------+  granted  (acquire anew)                 |  |          until deadline
//!            | acquiring |--------------------------------------->--+  |
//!            +-----------+  enable                                     | lost / illegal ttl /
//!              |  ^  | deadline passed (startup only)                  | local expiry / external:
//!              |  |  v                                                 | disable, lease lost
//!              |  | failed                                             v
//!              |  +--- release (its floor) --- dynamic ---------- loss ---- deterministic --> halted
//!              |
//!   shutdown from held/recovering: disable, then release (guard) --> stopped
//! ```

use std::collections::VecDeque;
use std::fmt;
use std::mem;
use std::sync::Arc;
use std::time::Duration;

use crate::backoff::{Backoff, Jitter};
use crate::cache::CachedLease;
use crate::config::{ConfigError, LeaseConfig};
use crate::strategy::{ErrorKind, Failure, Grant, Renewal};
use crate::time::{local_deadline, millis};
use nonce_core::MachineId;

/// How many failed releases a machine keeps to try again. A node loses at most one lease per
/// grant and gets no new grant while the coordinator is unreachable, so more than a few means
/// a coordinator that answers acquisitions but keeps failing releases.
const UNRELEASED_MAX: usize = 8;

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

impl Source {
    /// Lowercase label.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Initial => "initial",
            Self::Reacquire => "reacquire",
            Self::Cache => "cache",
            Self::Scheduled => "scheduled",
            Self::Shutdown => "shutdown",
        }
    }
}

/// A strategy operation (telemetry `operation`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Operation {
    /// [`Strategy::acquire`](crate::Strategy::acquire).
    Acquire,
    /// [`Strategy::renew`](crate::Strategy::renew).
    Renew,
    /// [`Strategy::release`](crate::Strategy::release).
    Release,
}

impl Operation {
    /// Lowercase label.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Acquire => "acquire",
            Self::Renew => "renew",
            Self::Release => "release",
        }
    }
}

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

impl OpResult {
    /// Lowercase label.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Ok => "ok",
            Self::Error => "error",
            Self::Retry => "retry",
            Self::Lost => "lost",
        }
    }

    fn of(kind: ErrorKind) -> Self {
        match kind {
            ErrorKind::Lost => Self::Lost,
            ErrorKind::Retry => Self::Retry,
            _ => Self::Error,
        }
    }
}

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
    /// ([`Grant::max_clock_offset`]): a successor's floor could not cover what it issued.
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
pub enum StartupError {
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
        /// The floor stored with it (Unix ms).
        floor_ms: u64,
        /// How far the floor is ahead of this node's clock, in ms.
        ahead_ms: u64,
    },
}

/// Something the driver must apply, in order.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum Effect<L> {
    /// (Re)enable every factory with `machine_id`, generating only while `now < deadline_ms`.
    EnableFactories {
        /// The leased ID.
        machine_id: MachineId,
        /// Every timestamp must be strictly above this floor (Unix ms): earlier holders of the
        /// ID may have issued timestamps up to it. 0 when the strategy stores no floor.
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
    /// Call [`Strategy::acquire_with_floor`](crate::Strategy::acquire_with_floor)`(requested,
    /// now_ms, floor_ms)`, giving up after `timeout`, then report with
    /// [`LeaseMachine::on_acquire_result`].
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
    /// Call [`Strategy::renew_with_floor`](crate::Strategy::renew_with_floor)`(lease, requested,
    /// floor_ms)`, giving up after `timeout`, then report with [`LeaseMachine::on_renew_result`].
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
    /// Call [`Strategy::release_with_floor`](crate::Strategy::release_with_floor)`(lease, guard,
    /// floor)`, giving up after `timeout`, then report with [`LeaseMachine::on_release_result`].
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
    Failed(StartupError),
    /// Shut down; the machine is finished.
    Stopped,
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

#[derive(Debug, Clone, Copy)]
struct InFlight {
    sent: u64,
    timeout: Duration,
}

impl InFlight {
    fn expires(self) -> u64 {
        self.sent.saturating_add(millis(self.timeout))
    }
}

#[derive(Debug)]
struct Held<L> {
    machine_id: MachineId,
    lease: Arc<L>,
    deadline: u64,
    ttl: Duration,
    /// The floor the lease was granted with (Unix ms).
    floor_ms: u64,
    /// The coordinator's clock at the last grant or renewal, with when that call was sent.
    coordinator: Option<CoordinatorReading>,
}

/// A coordinator clock reading and the local instant its request was sent (it was applied no
/// earlier than that).
#[derive(Debug, Clone, Copy)]
struct CoordinatorReading {
    sent: u64,
    coordinator_ms: u64,
}

#[derive(Debug, Clone, Copy)]
enum RenewStep {
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

#[derive(Debug)]
enum Phase<L> {
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
    Failed(StartupError),
    Stopped,
}

/// The lease lifecycle as a pure state machine. See the [module docs](self).
#[derive(Debug)]
pub struct LeaseMachine<L> {
    config: LeaseConfig,
    deterministic: bool,
    phase: Phase<L>,
    effects: VecDeque<Effect<L>>,
    jitter: Jitter,
    /// First lease held: the acquire deadline no longer applies.
    started: bool,
    startup_began: u64,
    startup_deadline: Option<u64>,
    /// Leases whose release failed on the way to acquisition (a lost lease, a refused grant),
    /// with their floors: released again between acquire attempts until one gets through,
    /// so a coordinator that was unreachable at the loss still learns what was issued.
    unreleased: Vec<(Arc<L>, u64)>,
    /// An acquire attempt failed since the last retried release: the next may go first.
    release_retry_due: bool,
}

impl<L> LeaseMachine<L> {
    /// A machine for a strategy that is (or is not) `deterministic`, optionally resuming from a
    /// `cached` lease, with backoff jitter drawn from `jitter`.
    ///
    /// The acquire deadline starts at the first [`poll_action`](Self::poll_action).
    ///
    /// # Errors
    /// When `config` fails [`LeaseConfig::validate`].
    pub fn new(
        config: LeaseConfig,
        deterministic: bool,
        cached: Option<CachedLease<L>>,
        jitter: Jitter,
    ) -> Result<Self, ConfigError> {
        config.validate()?;
        Ok(Self {
            config,
            deterministic,
            phase: Phase::New { cached },
            effects: VecDeque::new(),
            jitter,
            started: false,
            startup_began: 0,
            startup_deadline: None,
            unreleased: Vec::new(),
            release_retry_due: false,
        })
    }

    /// The same machine, marked as replacing one that had already started (a driver restarting
    /// after a panic): no acquire deadline and no error ends it, a failed renewal of the cached
    /// lease is reported as a loss, and its acquisitions are labelled reacquisitions. Only
    /// startup may fail.
    #[must_use]
    pub fn after_startup(mut self) -> Self {
        self.started = true;
        self
    }

    /// The configuration.
    pub const fn config(&self) -> &LeaseConfig {
        &self.config
    }

    /// A summary of the current state.
    pub fn state(&self) -> LeaseState {
        Self::phase_state(&self.phase)
    }

    fn phase_state(phase: &Phase<L>) -> LeaseState {
        match phase {
            // A refused grant is given back on the way to `then`.
            Phase::Releasing { then, .. } if !matches!(**then, Phase::Stopped) => {
                Self::phase_state(then)
            }
            Phase::New { .. } => LeaseState::Starting,
            Phase::Recovering { .. } => LeaseState::Recovering,
            Phase::Acquiring {
                source: Source::Reacquire,
                ..
            } => LeaseState::Reacquiring,
            Phase::Acquiring { .. } => LeaseState::Starting,
            Phase::Held { held, .. } => LeaseState::Held {
                machine_id: held.machine_id,
                deadline_ms: held.deadline,
            },
            Phase::Releasing { .. } => LeaseState::Releasing,
            Phase::Halted => LeaseState::Halted,
            Phase::Failed(_) => LeaseState::Failed,
            Phase::Stopped => LeaseState::Stopped,
        }
    }

    /// The machine ID while a lease is held.
    pub fn machine_id(&self) -> Option<MachineId> {
        match &self.phase {
            Phase::Held { held, .. } => Some(held.machine_id),
            _ => None,
        }
    }

    /// The next effect to apply, in order.
    pub fn poll_effect(&mut self) -> Option<Effect<L>> {
        self.effects.pop_front()
    }

    /// What to do at `now`. Call again after every result, outside signal, or wait.
    ///
    /// If a call is still outstanding this answers `Wait` until its timeout, and once `now`
    /// reaches that timeout it treats the call as timed out; the driver must then drop the call
    /// and not report its result.
    pub fn poll_action(&mut self, now: u64) -> Action<L> {
        loop {
            let phase = mem::replace(&mut self.phase, Phase::Stopped);
            let (next, action) = self.step(phase, now);
            self.phase = next;
            if let Some(action) = action {
                return action;
            }
        }
    }

    fn step(&mut self, phase: Phase<L>, now: u64) -> (Phase<L>, Option<Action<L>>) {
        match phase {
            Phase::New { cached } => {
                self.startup_began = now;
                self.startup_deadline = self
                    .config
                    .acquire_timeout()
                    .map(|t| now.saturating_add(millis(t)));
                let next = match cached {
                    Some(cached) => Phase::Recovering { cached, call: None },
                    None => Phase::Acquiring {
                        source: Source::Initial,
                        attempts: 0,
                        next_at: now,
                        call: None,
                        last_error: None,
                    },
                };
                (next, None)
            }
            Phase::Recovering {
                cached,
                call: Some(call),
            } => {
                if now >= call.expires() {
                    let failure = Failure::timeout(call.timeout);
                    (self.recovery_failed(cached, call, failure, now), None)
                } else {
                    let until = call.expires();
                    (
                        Phase::Recovering {
                            cached,
                            call: Some(call),
                        },
                        Some(Action::Wait { until }),
                    )
                }
            }
            Phase::Recovering { cached, call: None } => {
                if cached.deadline_ms <= now {
                    // The hot-path deadline already stops generation; say so explicitly too.
                    self.effects.push_back(Effect::DisableFactories);
                }
                let validity = (cached.deadline_ms > now).then_some(cached.deadline_ms);
                let timeout = self.timeout(now, [validity, self.startup_limit()]);
                let lease = Arc::clone(&cached.lease);
                let call = InFlight { sent: now, timeout };
                let action = Action::Renew {
                    lease,
                    source: Source::Cache,
                    requested: self.config.lease_duration(),
                    timeout,
                    floor_ms: self.floor_bound(now),
                };
                (
                    Phase::Recovering {
                        cached,
                        call: Some(call),
                    },
                    Some(action),
                )
            }
            Phase::Acquiring {
                source,
                attempts,
                next_at,
                call: Some(call),
                last_error,
            } => {
                if now >= call.expires() {
                    let failure = Failure::timeout(call.timeout);
                    (
                        self.acquire_failed(source, attempts, call, failure, now),
                        None,
                    )
                } else {
                    let phase = Phase::Acquiring {
                        source,
                        attempts,
                        next_at,
                        call: Some(call),
                        last_error,
                    };
                    (
                        phase,
                        Some(Action::Wait {
                            until: call.expires(),
                        }),
                    )
                }
            }
            Phase::Acquiring {
                source,
                attempts,
                next_at,
                call: None,
                last_error,
            } => {
                if let Some(deadline) = self.startup_limit()
                    && now >= deadline
                {
                    let error = StartupError::Timeout {
                        waited_ms: now.saturating_sub(self.startup_began),
                        attempts,
                        last_error,
                    };
                    return (Phase::Failed(error.clone()), Some(Action::Failed(error)));
                }
                if now < next_at {
                    let phase = Phase::Acquiring {
                        source,
                        attempts,
                        next_at,
                        call: None,
                        last_error,
                    };
                    return (phase, Some(Action::Wait { until: next_at }));
                }
                if self.release_retry_due
                    && let Some((lease, floor_ms)) = self.unreleased.pop()
                {
                    self.release_retry_due = false;
                    // First the release that did not get through (a lost lease's floor must
                    // reach the coordinator before any successor's acquire can).
                    let then = Phase::Acquiring {
                        source,
                        attempts,
                        next_at,
                        call: None,
                        last_error,
                    };
                    let phase = Phase::Releasing {
                        lease,
                        floor_ms,
                        call: None,
                        then: Box::new(then),
                    };
                    return (phase, None);
                }
                let timeout = self.timeout(now, [self.startup_limit(), None]);
                let call = InFlight { sent: now, timeout };
                let action = Action::Acquire {
                    source,
                    requested: self.config.lease_duration(),
                    timeout,
                    now_ms: now,
                    floor_ms: self.floor_bound(now),
                };
                let phase = Phase::Acquiring {
                    source,
                    attempts: attempts + 1,
                    next_at,
                    call: Some(call),
                    last_error,
                };
                (phase, Some(action))
            }
            Phase::Held { held, step } => self.step_held(held, step, now),
            Phase::Releasing {
                lease,
                floor_ms,
                call: None,
                then,
            } => {
                let timeout = self.config.call_timeout();
                let action = Action::Release {
                    lease: Arc::clone(&lease),
                    guard: self.config.release_guard(),
                    timeout,
                    floor_ms,
                };
                let call = Some(InFlight { sent: now, timeout });
                let phase = Phase::Releasing {
                    lease,
                    floor_ms,
                    call,
                    then,
                };
                (phase, Some(action))
            }
            Phase::Releasing {
                lease,
                floor_ms,
                call: Some(call),
                then,
            } => {
                if now >= call.expires() {
                    let source = Self::release_source(&then);
                    let failure = Failure::timeout(call.timeout);
                    self.release_failed(lease, floor_ms, &then);
                    self.release_finished(call, source, Err(failure), now);
                    (*then, None)
                } else {
                    let until = call.expires();
                    let phase = Phase::Releasing {
                        lease,
                        floor_ms,
                        call: Some(call),
                        then,
                    };
                    (phase, Some(Action::Wait { until }))
                }
            }
            Phase::Halted => (Phase::Halted, Some(Action::Halted)),
            Phase::Failed(error) => (Phase::Failed(error.clone()), Some(Action::Failed(error))),
            Phase::Stopped => (Phase::Stopped, Some(Action::Stopped)),
        }
    }

    fn step_held(
        &mut self,
        held: Held<L>,
        step: RenewStep,
        now: u64,
    ) -> (Phase<L>, Option<Action<L>>) {
        if now >= held.deadline {
            // Covers a clock that jumped past the deadline (suspend) as well as failed renewals.
            let lost = (Arc::clone(&held.lease), held.floor_ms);
            return (
                self.lose(lost, held.deadline, LossReason::LocalExpiry, now),
                None,
            );
        }
        let deadline = held.deadline;
        let (at, failures) = match step {
            RenewStep::Idle { at } => (at, 0),
            RenewStep::Backoff { at, failures } => (at, failures),
            RenewStep::InFlight {
                call,
                source,
                failures,
            } => {
                if now >= call.expires() {
                    return (
                        self.renew_failed(
                            held,
                            call,
                            source,
                            failures,
                            Failure::timeout(call.timeout),
                            now,
                        ),
                        None,
                    );
                }
                let wait = Action::Wait {
                    until: call.expires().min(deadline),
                };
                return (Phase::Held { held, step }, Some(wait));
            }
        };
        if now < at {
            return (
                Phase::Held { held, step },
                Some(Action::Wait {
                    until: at.min(deadline),
                }),
            );
        }
        // The call must return before the deadline so a hung coordinator cannot keep us enabled.
        let timeout = self.timeout(now, [Some(deadline), None]);
        let call = InFlight { sent: now, timeout };
        let action = Action::Renew {
            lease: Arc::clone(&held.lease),
            source: Source::Scheduled,
            requested: self.config.lease_duration(),
            timeout,
            floor_ms: self.floor_bound(now),
        };
        let step = RenewStep::InFlight {
            call,
            source: Source::Scheduled,
            failures,
        };
        (Phase::Held { held, step }, Some(action))
    }

    /// Reports the result of the outstanding `Acquire`, received at `now`. Ignored if no acquire
    /// is outstanding (a late or cancelled call).
    pub fn on_acquire_result(&mut self, now: u64, result: Result<Grant<L>, Failure>) {
        let phase = mem::replace(&mut self.phase, Phase::Stopped);
        let Phase::Acquiring {
            source,
            attempts,
            call: Some(call),
            ..
        } = phase
        else {
            self.phase = phase;
            return;
        };
        let latency_ms = now.saturating_sub(call.sent);
        let grant = match result {
            Ok(grant) => grant,
            Err(failure) => {
                self.phase = self.acquire_failed(source, attempts, call, failure, now);
                return;
            }
        };
        let ttl_ms = millis(grant.ttl);
        let offset =
            Self::clock_offset(call.sent, now, grant.coordinator_ms, grant.max_clock_offset);
        let deadline = match (self.deadline_for(call.sent, ttl_ms), offset) {
            (Err(reason), _) => Err(Failure::new(ErrorKind::Other, reason.to_string())),
            // Not retried at startup: the clock is the operator's to fix.
            (Ok(_), Some(offset)) => {
                Err(Failure::new(ErrorKind::Misconfigured, offset.to_string()))
            }
            (Ok(deadline), None) if deadline <= now => Err(Failure::new(
                ErrorKind::Retry,
                "grant arrived after its local deadline",
            )),
            (Ok(deadline), None) => Ok(deadline),
        };
        let deadline = match deadline {
            Ok(deadline) => deadline,
            Err(failure) => {
                let then = self.acquire_failed(source, attempts, call, failure, now);
                // Nothing was issued under the refused grant: its floor stays as it was.
                self.phase = Phase::Releasing {
                    lease: Arc::new(grant.lease),
                    floor_ms: grant.floor_ms,
                    call: None,
                    then: Box::new(then),
                };
                return;
            }
        };
        self.event(OperationEvent {
            operation: Operation::Acquire,
            source,
            result: OpResult::Ok,
            machine_id: Some(grant.machine_id),
            ttl_ms: Some(ttl_ms),
            latency_ms,
            error: None,
        });
        let held = Held {
            machine_id: grant.machine_id,
            lease: Arc::new(grant.lease),
            deadline,
            ttl: grant.ttl,
            floor_ms: grant.floor_ms,
            coordinator: grant
                .coordinator_ms
                .map(|coordinator_ms| CoordinatorReading {
                    sent: call.sent,
                    coordinator_ms,
                }),
        };
        self.enable(&held, now);
        self.store_cache(&held);
        self.started = true;
        let step = RenewStep::Idle {
            at: self.next_renewal(call.sent, ttl_ms),
        };
        self.phase = Phase::Held { held, step };
    }

    /// Reports the result of the outstanding `Renew`, received at `now`. Ignored if no renewal
    /// is outstanding.
    pub fn on_renew_result(&mut self, now: u64, result: Result<Renewal<L>, Failure>) {
        let phase = mem::replace(&mut self.phase, Phase::Stopped);
        self.phase = match phase {
            Phase::Recovering {
                cached,
                call: Some(call),
            } => self.recovered(cached, call, result, now),
            Phase::Held {
                mut held,
                step:
                    RenewStep::InFlight {
                        call,
                        source,
                        failures,
                    },
            } => {
                let latency_ms = now.saturating_sub(call.sent);
                match result {
                    Ok(renewal) => {
                        let ttl_ms = millis(renewal.ttl);
                        let mut event = OperationEvent {
                            operation: Operation::Renew,
                            source,
                            result: OpResult::Ok,
                            machine_id: Some(held.machine_id),
                            ttl_ms: Some(ttl_ms),
                            latency_ms,
                            error: None,
                        };
                        let deadline = self.deadline_for(call.sent, ttl_ms).and_then(|deadline| {
                            let offset = Self::clock_offset(
                                call.sent,
                                now,
                                renewal.coordinator_ms,
                                renewal.max_clock_offset,
                            );
                            match offset
                                .or_else(|| self.clock_jump(&held, renewal.coordinator_ms, now))
                            {
                                Some(reason) => Err(reason),
                                None => Ok(deadline),
                            }
                        });
                        match deadline {
                            Err(reason) => {
                                event.result = OpResult::Lost;
                                self.event(event);
                                let lost = (Arc::new(renewal.lease), held.floor_ms);
                                self.lose(lost, held.deadline, reason, now)
                            }
                            Ok(deadline) => {
                                self.event(event);
                                if let Some(coordinator_ms) = renewal.coordinator_ms {
                                    held.coordinator = Some(CoordinatorReading {
                                        sent: call.sent,
                                        coordinator_ms,
                                    });
                                }
                                held.lease = Arc::new(renewal.lease);
                                held.ttl = renewal.ttl;
                                held.deadline = deadline;
                                if deadline <= now {
                                    let lost = (Arc::clone(&held.lease), held.floor_ms);
                                    self.lose(lost, deadline, LossReason::LocalExpiry, now)
                                } else {
                                    self.effects.push_back(Effect::ExtendDeadline {
                                        deadline_ms: deadline,
                                    });
                                    self.store_cache(&held);
                                    let step = RenewStep::Idle {
                                        at: self.next_renewal(call.sent, ttl_ms),
                                    };
                                    Phase::Held { held, step }
                                }
                            }
                        }
                    }
                    Err(failure) => self.renew_failed(held, call, source, failures, failure, now),
                }
            }
            other => other,
        };
    }

    /// Reports that the outstanding `Release` finished (successfully or not). Ignored if no
    /// release is outstanding.
    pub fn on_release_result(&mut self, now: u64, result: Result<(), Failure>) {
        match mem::replace(&mut self.phase, Phase::Stopped) {
            Phase::Releasing {
                lease,
                floor_ms,
                call: Some(call),
                then,
            } => {
                if result.is_err() {
                    self.release_failed(lease, floor_ms, &then);
                }
                self.release_finished(call, Self::release_source(&then), result, now);
                self.phase = *then;
            }
            other => self.phase = other,
        }
    }

    /// An outside signal (for example a conflict guard) says this node must stop using its ID.
    ///
    /// Returns whether a lease was held (and is now dropped). The driver must drop any
    /// outstanding renew call.
    pub fn lease_lost(&mut self, now: u64, reason: impl Into<String>) -> bool {
        let phase = mem::replace(&mut self.phase, Phase::Stopped);
        let (lost, deadline) = match &phase {
            Phase::Held { held, .. } => ((Arc::clone(&held.lease), held.floor_ms), held.deadline),
            Phase::Recovering { cached, .. } => (
                (Arc::clone(&cached.lease), cached.floor_ms),
                cached.deadline_ms,
            ),
            _ => {
                self.phase = phase;
                return false;
            }
        };
        self.phase = self.lose(lost, deadline, LossReason::External(reason.into()), now);
        true
    }

    /// Begins a graceful shutdown: factories are disabled first, then the lease is released.
    /// The driver must drop any outstanding call and keep polling until `Stopped`.
    pub fn shutdown(&mut self, now: u64) {
        let _ = now;
        let phase = mem::replace(&mut self.phase, Phase::Stopped);
        let lease = match phase {
            Phase::Releasing { ref then, .. } if matches!(**then, Phase::Stopped) => {
                self.phase = phase;
                return;
            }
            Phase::Stopped => {
                self.phase = phase;
                return;
            }
            Phase::Held { held, .. } => Some((held.lease, held.floor_ms)),
            Phase::Recovering { cached, .. } => Some((cached.lease, cached.floor_ms)),
            // A refused grant being given back is released all the same, then the machine stops.
            Phase::Releasing {
                lease, floor_ms, ..
            } => Some((lease, floor_ms)),
            Phase::New { .. } | Phase::Acquiring { .. } | Phase::Halted | Phase::Failed(_) => None,
        };
        // Disable before the release can reach the coordinator: no nonce after the hand-back.
        self.effects.push_back(Effect::DisableFactories);
        self.effects.push_back(Effect::ClearCache);
        self.phase = match lease {
            Some((lease, floor_ms)) => Phase::Releasing {
                lease,
                floor_ms,
                call: None,
                then: Box::new(Phase::Stopped),
            },
            None => Phase::Stopped,
        };
    }

    fn recovered(
        &mut self,
        cached: CachedLease<L>,
        call: InFlight,
        result: Result<Renewal<L>, Failure>,
        now: u64,
    ) -> Phase<L> {
        let renewal = match result {
            Ok(renewal) => renewal,
            Err(failure) => return self.recovery_failed(cached, call, failure, now),
        };
        let ttl_ms = millis(renewal.ttl);
        if let Some(offset) = Self::clock_offset(
            call.sent,
            now,
            renewal.coordinator_ms,
            renewal.max_clock_offset,
        ) {
            return self.recovery_failed(
                cached,
                call,
                Failure::new(ErrorKind::Lost, offset.to_string()),
                now,
            );
        }
        let deadline = match self.deadline_for(call.sent, ttl_ms) {
            Ok(deadline) if deadline > now => deadline,
            Ok(_) => {
                return self.recovery_failed(
                    cached,
                    call,
                    Failure::new(ErrorKind::Retry, "renewal arrived after its local deadline"),
                    now,
                );
            }
            Err(reason) => {
                return self.recovery_failed(
                    cached,
                    call,
                    Failure::new(ErrorKind::Lost, reason.to_string()),
                    now,
                );
            }
        };
        self.event(OperationEvent {
            operation: Operation::Renew,
            source: Source::Cache,
            result: OpResult::Ok,
            machine_id: Some(cached.machine_id),
            ttl_ms: Some(ttl_ms),
            latency_ms: now.saturating_sub(call.sent),
            error: None,
        });
        let held = Held {
            machine_id: cached.machine_id,
            lease: Arc::new(renewal.lease),
            deadline,
            ttl: renewal.ttl,
            floor_ms: cached.floor_ms,
            coordinator: renewal
                .coordinator_ms
                .map(|coordinator_ms| CoordinatorReading {
                    sent: call.sent,
                    coordinator_ms,
                }),
        };
        self.enable(&held, now);
        self.store_cache(&held);
        self.started = true;
        Phase::Held {
            held,
            step: RenewStep::Idle {
                at: self.next_renewal(call.sent, ttl_ms),
            },
        }
    }

    fn recovery_failed(
        &mut self,
        cached: CachedLease<L>,
        call: InFlight,
        failure: Failure,
        now: u64,
    ) -> Phase<L> {
        self.event(OperationEvent {
            operation: Operation::Renew,
            source: Source::Cache,
            result: OpResult::of(failure.kind),
            machine_id: Some(cached.machine_id),
            ttl_ms: None,
            latency_ms: now.saturating_sub(call.sent),
            error: Some(failure.clone()),
        });
        if self.started {
            // The ID was in use before the restart: stopping is a loss the application hears of.
            let lost = (Arc::clone(&cached.lease), cached.floor_ms);
            return self.lose(
                lost,
                cached.deadline_ms,
                LossReason::Lost(failure.reason),
                now,
            );
        }
        // The previous manager may have left factories enabled with this ID.
        self.effects.push_back(Effect::DisableFactories);
        self.effects.push_back(Effect::ClearCache);
        Phase::Acquiring {
            source: Source::Initial,
            attempts: 0,
            next_at: now,
            call: None,
            last_error: Some(failure),
        }
    }

    fn acquire_failed(
        &mut self,
        source: Source,
        attempts: u32,
        call: InFlight,
        failure: Failure,
        now: u64,
    ) -> Phase<L> {
        // One retry of a failed release (if any) before the next attempt.
        self.release_retry_due = true;
        self.event(OperationEvent {
            operation: Operation::Acquire,
            source,
            result: OpResult::of(failure.kind),
            machine_id: None,
            ttl_ms: None,
            latency_ms: now.saturating_sub(call.sent),
            error: Some(failure.clone()),
        });
        if !self.started
            && matches!(
                failure.kind,
                ErrorKind::Unsupported | ErrorKind::Misconfigured
            )
        {
            return Phase::Failed(StartupError::Fatal(failure));
        }
        // During startup the acquire timeout bounds the wait; after it (or without one), a
        // node without an ID retries forever, so the backoff is capped as renewals are, not
        // left to grow to a day.
        let cap = if self.startup_limit().is_none() {
            millis(self.config.renew_interval())
        } else {
            u64::MAX
        };
        let backoff = Backoff::new(millis(self.config.acquire_backoff_base()), cap);
        let mut delay = backoff.delay_ms(attempts, &mut self.jitter);
        if let Some(deadline) = self.startup_limit() {
            delay = delay.min(deadline.saturating_sub(now));
        }
        let next_at = now.saturating_add(delay);
        if self
            .startup_limit()
            .is_none_or(|deadline| next_at < deadline)
        {
            self.events_retry(Operation::Acquire, attempts, delay, &failure);
        }
        Phase::Acquiring {
            source,
            attempts,
            next_at,
            call: None,
            last_error: Some(failure),
        }
    }

    fn renew_failed(
        &mut self,
        held: Held<L>,
        call: InFlight,
        source: Source,
        failures: u32,
        failure: Failure,
        now: u64,
    ) -> Phase<L> {
        self.event(OperationEvent {
            operation: Operation::Renew,
            source,
            result: OpResult::of(failure.kind),
            machine_id: Some(held.machine_id),
            ttl_ms: None,
            latency_ms: now.saturating_sub(call.sent),
            error: Some(failure.clone()),
        });
        if failure.kind == ErrorKind::Lost {
            let lost = (Arc::clone(&held.lease), held.floor_ms);
            return self.lose(lost, held.deadline, LossReason::Lost(failure.reason), now);
        }
        // Uncertain: the lease stays usable until its local deadline, which step_held enforces.
        let failures = failures.saturating_add(1);
        let backoff = Backoff::new(
            millis(self.config.renew_backoff_base()),
            millis(self.config.renew_interval()),
        );
        let delay = backoff.delay_ms(failures, &mut self.jitter);
        self.events_retry(Operation::Renew, failures, delay, &failure);
        Phase::Held {
            held,
            step: RenewStep::Backoff {
                at: now.saturating_add(delay),
                failures,
            },
        }
    }

    /// A release on the way to acquisition that did not get through is tried again after the
    /// next failed acquire attempt, before the one after it (once per attempt) (at most `UNRELEASED_MAX` are kept: the oldest go first). One on
    /// the way to `Stopped` (shutdown) is not: the process is going away.
    fn release_failed(&mut self, lease: Arc<L>, floor_ms: u64, then: &Phase<L>) {
        if matches!(then, Phase::Stopped) {
            return;
        }
        if self.unreleased.len() >= UNRELEASED_MAX {
            self.unreleased.remove(0);
        }
        self.unreleased.push((lease, floor_ms));
    }

    /// Why a release going on to `then` was made: shutdown, or the acquisition it makes way
    /// for (a refused grant at startup, a loss).
    fn release_source(then: &Phase<L>) -> Source {
        match then {
            Phase::Acquiring { source, .. } => *source,
            _ => Source::Shutdown,
        }
    }

    fn release_finished(
        &mut self,
        call: InFlight,
        source: Source,
        result: Result<(), Failure>,
        now: u64,
    ) {
        let error = result.err();
        self.event(OperationEvent {
            operation: Operation::Release,
            source,
            result: error
                .as_ref()
                .map_or(OpResult::Ok, |f| OpResult::of(f.kind)),
            machine_id: None,
            ttl_ms: None,
            latency_ms: now.saturating_sub(call.sent),
            error,
        });
    }

    /// Disable, tell the application, then reacquire (dynamic) or halt (deterministic).
    ///
    /// A dynamic strategy first gets the lost lease back in a release (`lost`: the lease and
    /// the floor it was granted with), which records what was issued under it. When the
    /// coordinator forgot the lease (a restart without persistence, a failover to a replica
    /// that missed the last writes), it forgot the floor the renewals recorded too: this
    /// release puts it back, before the coordinator's amnesia guard lets a successor in (the
    /// guard holds acquisitions off for the longest lease, and this node notices the loss by
    /// its deadline at the latest, which comes before that). Releasing a lease that is no
    /// longer ours touches nobody else's (the [`Strategy`](crate::Strategy) contract).
    fn lose(
        &mut self,
        lost: (Arc<L>, u64),
        deadline: u64,
        reason: LossReason,
        now: u64,
    ) -> Phase<L> {
        self.effects.push_back(Effect::DisableFactories);
        self.effects.push_back(Effect::LeaseLost {
            reason,
            remaining_ttl_ms: deadline.saturating_sub(now),
        });
        self.effects.push_back(Effect::ClearCache);
        if self.deterministic {
            // The same ID would come back: reacquiring it cannot resolve a loss or a conflict.
            Phase::Halted
        } else {
            let (lease, floor_ms) = lost;
            Phase::Releasing {
                lease,
                floor_ms,
                call: None,
                then: Box::new(Phase::Acquiring {
                    source: Source::Reacquire,
                    attempts: 0,
                    next_at: now,
                    call: None,
                    last_error: None,
                }),
            }
        }
    }

    /// The local deadline of a grant sent at `sent` with `ttl_ms`, or why the TTL is illegal.
    fn deadline_for(&self, sent: u64, ttl_ms: u64) -> Result<u64, LossReason> {
        let min_ttl_ms = millis(self.config.min_ttl());
        if ttl_ms < min_ttl_ms {
            return Err(LossReason::IllegalTtl { ttl_ms, min_ttl_ms });
        }
        // Never past the floor the request recorded, whatever TTL came back.
        Ok(
            local_deadline(sent, Duration::from_millis(ttl_ms), self.config.margin())
                .min(self.floor_bound(sent)),
        )
    }

    /// The floor a call sent at `sent` records: the latest deadline its grant can give, so it
    /// bounds every timestamp issued under that grant.
    fn floor_bound(&self, sent: u64) -> u64 {
        local_deadline(sent, self.config.lease_duration(), self.config.margin())
    }

    /// Enables the targets above the lease's floor, saying so when the floor is ahead of us.
    fn enable(&mut self, held: &Held<L>, now: u64) {
        if held.floor_ms > now {
            self.effects
                .push_back(Effect::Event(LeaseEvent::FloorAhead {
                    machine_id: held.machine_id,
                    floor_ms: held.floor_ms,
                    ahead_ms: held.floor_ms - now,
                }));
        }
        self.effects.push_back(Effect::EnableFactories {
            machine_id: held.machine_id,
            floor_ms: held.floor_ms,
            deadline_ms: held.deadline,
        });
    }

    /// A coordinator clock that ran ahead of our own elapsed time by more than the margin since
    /// the last reading. The coordinator applied the last call no earlier than its `sent` and
    /// this one no later than `now`, so its clock may advance by at most `now - sent` (plus the
    /// margin, which also absorbs rate drift). Backward steps only lengthen leases: not a loss.
    fn clock_jump(
        &self,
        held: &Held<L>,
        coordinator_ms: Option<u64>,
        now: u64,
    ) -> Option<LossReason> {
        let last = held.coordinator?;
        let moved = coordinator_ms?.saturating_sub(last.coordinator_ms);
        let elapsed = now.saturating_sub(last.sent);
        let margin_ms = millis(self.config.margin());
        let ahead_ms = moved.saturating_sub(elapsed);
        (ahead_ms > margin_ms).then_some(LossReason::CoordinatorClockJump {
            ahead_ms,
            margin_ms,
        })
    }

    /// This node's clock (read at `sent` and `now`) not proven within `max` of the coordinator's
    /// reading, taken somewhere in between: ahead when even `now` is more than `max` past it,
    /// behind when even `sent` is more than `max` short of it. Strategies that count on a bound
    /// (an amnesia hold-off that outlasts a forgotten holder's timestamps) get it enforced here,
    /// at every grant and renewal; between them clock rates drift within the margin.
    fn clock_offset(
        sent: u64,
        now: u64,
        coordinator_ms: Option<u64>,
        max: Option<Duration>,
    ) -> Option<LossReason> {
        let (coordinator_ms, max_ms) = (coordinator_ms?, millis(max?));
        let ahead_ms = now.saturating_sub(coordinator_ms);
        let behind_ms = coordinator_ms.saturating_sub(sent);
        if ahead_ms > max_ms {
            Some(LossReason::ClockOffset {
                ahead: true,
                offset_ms: ahead_ms,
                max_ms,
            })
        } else if behind_ms > max_ms {
            Some(LossReason::ClockOffset {
                ahead: false,
                offset_ms: behind_ms,
                max_ms,
            })
        } else {
            None
        }
    }

    /// `sent + min(renew_interval, ttl - margin) - margin`; positive by config validation.
    fn next_renewal(&self, sent: u64, ttl_ms: u64) -> u64 {
        let margin = millis(self.config.margin());
        let safe_ttl = ttl_ms.saturating_sub(margin);
        sent.saturating_add(
            millis(self.config.renew_interval())
                .min(safe_ttl)
                .saturating_sub(margin),
        )
    }

    /// The call timeout, shortened so the call ends by every given limit (absolute ms).
    fn timeout(&self, now: u64, limits: [Option<u64>; 2]) -> Duration {
        let mut timeout = millis(self.config.call_timeout());
        for limit in limits.into_iter().flatten() {
            timeout = timeout.min(limit.saturating_sub(now));
        }
        Duration::from_millis(timeout)
    }

    fn startup_limit(&self) -> Option<u64> {
        if self.started {
            None
        } else {
            self.startup_deadline
        }
    }

    fn store_cache(&mut self, held: &Held<L>) {
        self.effects.push_back(Effect::StoreCache(CachedLease {
            machine_id: held.machine_id,
            lease: Arc::clone(&held.lease),
            deadline_ms: held.deadline,
            ttl: held.ttl,
            floor_ms: held.floor_ms,
        }));
    }

    fn event(&mut self, event: OperationEvent) {
        self.effects
            .push_back(Effect::Event(LeaseEvent::Operation(event)));
    }

    fn events_retry(
        &mut self,
        operation: Operation,
        attempt: u32,
        delay_ms: u64,
        failure: &Failure,
    ) {
        self.effects
            .push_back(Effect::Event(LeaseEvent::Retry(RetryEvent {
                operation,
                attempt,
                delay_ms,
                reason: failure.reason.clone(),
            })));
    }
}
