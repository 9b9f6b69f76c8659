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

mod action;
mod event;
mod failure;
mod phase;
mod state;
mod step;
mod timing;

use std::collections::VecDeque;
use std::mem;
use std::sync::Arc;

use lease_core::time::millis;
use lease_core::{ErrorKind, Grant, MachineId, Renewal};

use crate::{Failure, LeaseConfig, LeaseConfigError};

pub use action::{Action, Effect, OpResult, Operation, Source};
pub use event::{LeaseEvent, OperationEvent, RetryEvent};
use phase::{CoordinatorReading, Held, InFlight, Phase, RenewStep};
pub use state::{AcquireError, LeaseState, LossReason};

use crate::backoff::Jitter;
use crate::cache::CachedLease;

/// How many failed releases a machine keeps to try again. A node loses at most one lease per
/// grant and gets no new grant while the coordinator is unreachable, so more than a few means
/// a coordinator that answers acquisitions but keeps failing releases.
const UNRELEASED_MAX: usize = 8;

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
    ) -> Result<Self, LeaseConfigError> {
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
        self.state().machine_id()
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

    /// Reports the result of the outstanding `Acquire`, received at `now`. Ignored if no acquire
    /// is outstanding (a late or cancelled call).
    pub fn on_acquire_result(&mut self, now: u64, result: Result<Grant<L>, Failure>) {
        let Some((source, attempts, call)) = self.take_outstanding_acquire() else {
            return;
        };
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
        let failure = match (self.deadline_for(call.sent, ttl_ms), offset) {
            (Err(reason), _) => Failure::new(ErrorKind::Other, reason.to_string()),
            // Not retried at startup: the clock is the operator's to fix.
            (Ok(_), Some(offset)) => Failure::new(ErrorKind::Misconfigured, offset.to_string()),
            (Ok(deadline), None) if deadline <= now => {
                Failure::new(ErrorKind::Retry, "grant arrived after its local deadline")
            }
            (Ok(deadline), None) => {
                let id = Some(grant.machine_id);
                self.finished(Operation::Acquire, source, id, call, now, Ok(Some(ttl_ms)));
                let held = Held {
                    machine_id: grant.machine_id,
                    lease: Arc::new(grant.lease),
                    deadline,
                    ttl: grant.ttl,
                    floor_ms: grant.floor_ms,
                    coordinator: CoordinatorReading::of(call.sent, grant.coordinator_ms),
                };
                self.phase = self.hold(held, call.sent, now);
                return;
            }
        };
        self.phase = self.refuse(source, attempts, call, grant, failure, now);
    }

    /// Refuses the grant the outstanding `Acquire` returned, received at `now`, for a reason
    /// only the driver can see (its ID is held by another manager of this process): the
    /// grant is given back with the floor it came with, and `failure` is the acquisition's
    /// outcome, retried or fatal by its kind. Ignored if no acquire is outstanding.
    pub fn on_acquire_refused(&mut self, now: u64, grant: Grant<L>, failure: Failure) {
        let Some((source, attempts, call)) = self.take_outstanding_acquire() else {
            return;
        };
        self.phase = self.refuse(source, attempts, call, grant, failure, now);
    }

    /// The outstanding `Acquire`'s source, attempt count and call, leaving the phase
    /// `Stopped` for the caller to replace; `None`, the phase untouched, when none is
    /// outstanding.
    fn take_outstanding_acquire(&mut self) -> Option<(Source, u32, InFlight)> {
        let phase = mem::replace(&mut self.phase, Phase::Stopped);
        let Phase::Acquiring {
            source,
            attempts,
            call: Some(call),
            ..
        } = phase
        else {
            self.phase = phase;
            return None;
        };
        Some((source, attempts, call))
    }

    /// The phase after a refused grant: releasing it, then what a failed acquisition leads to.
    fn refuse(
        &mut self,
        source: Source,
        attempts: u32,
        call: InFlight,
        grant: Grant<L>,
        failure: Failure,
        now: u64,
    ) -> Phase<L> {
        let then = self.acquire_failed(source, attempts, call, failure, now);
        // Nothing was issued under the refused grant: its floor stays as it was.
        Phase::releasing(Arc::new(grant.lease), grant.floor_ms, then)
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
                held,
                step:
                    RenewStep::InFlight {
                        call,
                        source,
                        failures,
                    },
            } => match result {
                Ok(renewal) => self.renewed(held, call, source, renewal, now),
                Err(failure) => self.renew_failed(held, call, source, failures, failure, now),
            },
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
                let outcome = result.as_ref().copied();
                self.phase = self.released((lease, floor_ms), call, *then, outcome, now);
            }
            other => self.phase = other,
        }
    }

    /// An outside signal (for example a conflict guard) says this node must stop using its ID.
    ///
    /// Returns whether a lease was held (and is now dropped). The driver must drop any
    /// outstanding renew call.
    pub fn lease_lost(&mut self, now: u64, reason: impl Into<String>) -> bool {
        let Some((lost, deadline)) = self.phase.lease() else {
            return false;
        };
        self.phase = self.lose(lost, deadline, LossReason::External(reason.into()), now);
        true
    }

    /// Begins a graceful shutdown: factories are disabled first, then the lease is released.
    /// The driver must drop any outstanding call and keep polling until `Stopped`.
    pub fn shutdown(&mut self, now: u64) {
        let _ = now;
        // Stopped already, or releasing on the way there.
        if matches!(self.state(), LeaseState::Stopped | LeaseState::Releasing) {
            return;
        }
        let lease = match &self.phase {
            // A refused grant being given back is released all the same, then the machine stops.
            Phase::Releasing {
                lease, floor_ms, ..
            } => Some((Arc::clone(lease), *floor_ms)),
            phase => phase.lease().map(|(lease, _)| lease),
        };
        // Disable before the release can reach the coordinator: no nonce after the hand-back.
        self.effects.push_back(Effect::DisableFactories);
        self.effects.push_back(Effect::ClearCache);
        self.phase = match lease {
            Some((lease, floor_ms)) => Phase::releasing(lease, floor_ms, Phase::Stopped),
            None => Phase::Stopped,
        };
    }

    /// The renewal of `held` sent as `call`, answered at `now`: the lease extended, or lost when
    /// the renewal shows it may not be used.
    fn renewed(
        &mut self,
        mut held: Held<L>,
        call: InFlight,
        source: Source,
        renewal: Renewal<L>,
        now: u64,
    ) -> Phase<L> {
        let ttl_ms = millis(renewal.ttl);
        let offset = Self::clock_offset(
            call.sent,
            now,
            renewal.coordinator_ms,
            renewal.max_clock_offset,
        );
        let deadline = self.deadline_for(call.sent, ttl_ms).and_then(|deadline| {
            let jump = || self.clock_jump(&held, renewal.coordinator_ms, now);
            offset.or_else(jump).map_or(Ok(deadline), Err)
        });
        let deadline = match deadline {
            Ok(deadline) => deadline,
            Err(reason) => {
                self.event(OperationEvent {
                    operation: Operation::Renew,
                    source,
                    result: OpResult::Lost,
                    machine_id: Some(held.machine_id),
                    ttl_ms: Some(ttl_ms),
                    latency_ms: now.saturating_sub(call.sent),
                    error: None,
                });
                let lost = (Arc::new(renewal.lease), held.floor_ms);
                return self.lose(lost, held.deadline, reason, now);
            }
        };
        let id = Some(held.machine_id);
        self.finished(Operation::Renew, source, id, call, now, Ok(Some(ttl_ms)));
        held.coordinator =
            CoordinatorReading::of(call.sent, renewal.coordinator_ms).or(held.coordinator);
        held.lease = Arc::new(renewal.lease);
        held.ttl = renewal.ttl;
        held.deadline = deadline;
        if deadline <= now {
            let lost = (Arc::clone(&held.lease), held.floor_ms);
            return self.lose(lost, deadline, LossReason::LocalExpiry, now);
        }
        self.effects.push_back(Effect::ExtendDeadline {
            deadline_ms: deadline,
        });
        self.store_cache(&held);
        let at = self.next_renewal(call.sent, ttl_ms);
        Phase::Held {
            held,
            step: RenewStep::Idle { at },
        }
    }

    fn recovered(
        &mut self,
        cached: CachedLease<L>,
        call: InFlight,
        result: Result<Renewal<L>, Failure>,
        now: u64,
    ) -> Phase<L> {
        let checked = result.and_then(|renewal| {
            let offset = Self::clock_offset(
                call.sent,
                now,
                renewal.coordinator_ms,
                renewal.max_clock_offset,
            );
            let deadline = offset
                .map_or_else(|| self.deadline_for(call.sent, millis(renewal.ttl)), Err)
                .map_err(|reason| Failure::new(ErrorKind::Lost, reason.to_string()))?;
            if deadline <= now {
                let late = "renewal arrived after its local deadline";
                return Err(Failure::new(ErrorKind::Retry, late));
            }
            Ok((renewal, deadline))
        });
        let (renewal, deadline) = match checked {
            Ok(checked) => checked,
            Err(failure) => return self.recovery_failed(cached, call, failure, now),
        };
        let (id, ttl_ms) = (Some(cached.machine_id), Some(millis(renewal.ttl)));
        let renew = Operation::Renew;
        self.finished(renew, Source::Cache, id, call, now, Ok(ttl_ms));
        let held = Held {
            machine_id: cached.machine_id,
            lease: Arc::new(renewal.lease),
            deadline,
            ttl: renewal.ttl,
            // New factories start above what earlier ones issued under this lease.
            floor_ms: cached.resume_floor_ms(),
            coordinator: CoordinatorReading::of(call.sent, renewal.coordinator_ms),
        };
        self.hold(held, call.sent, now)
    }

    /// Holds `held`, granted or renewed by a call sent at `sent`: the targets enabled, the lease
    /// cached, its renewal scheduled.
    fn hold(&mut self, held: Held<L>, sent: u64, now: u64) -> Phase<L> {
        self.enable(&held, now);
        self.store_cache(&held);
        self.started = true;
        let at = self.next_renewal(sent, millis(held.ttl));
        Phase::Held {
            held,
            step: RenewStep::Idle { at },
        }
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

    fn store_cache(&mut self, held: &Held<L>) {
        self.effects.push_back(Effect::StoreCache(CachedLease {
            machine_id: held.machine_id,
            lease: Arc::clone(&held.lease),
            deadline_ms: held.deadline,
            ttl: held.ttl,
            floor_ms: held.floor_ms,
            // The driver raises it to what its targets report.
            issued_up_to_ms: 0,
        }));
    }

    /// Telemetry of `operation`, sent as `call` and finished at `now`: `Ok` with the TTL it
    /// granted, if any, or failed.
    fn finished(
        &mut self,
        operation: Operation,
        source: Source,
        machine_id: Option<MachineId>,
        call: InFlight,
        now: u64,
        outcome: Result<Option<u64>, &Failure>,
    ) {
        self.event(OperationEvent {
            operation,
            source,
            result: outcome.map_or_else(|failure| OpResult::of(failure.kind), |_| OpResult::Ok),
            machine_id,
            ttl_ms: outcome.ok().flatten(),
            latency_ms: now.saturating_sub(call.sent),
            error: outcome.err().cloned(),
        });
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
