//! Where a failed call, a loss or a finished release takes the machine: backoff and retry,
//! reacquisition, halting, or the end of startup.

use std::sync::Arc;

use lease_core::ErrorKind;
use lease_core::time::millis;

use super::phase::{Held, InFlight, Phase, RenewStep};
use super::{AcquireError, Effect, LeaseMachine, LossReason, Operation, Source, UNRELEASED_MAX};
use crate::Failure;
use crate::backoff::Backoff;
use crate::cache::CachedLease;

impl<L> LeaseMachine<L> {
    pub(super) fn recovery_failed(
        &mut self,
        cached: CachedLease<L>,
        call: InFlight,
        failure: Failure,
        now: u64,
    ) -> Phase<L> {
        let (renew, id) = (Operation::Renew, Some(cached.machine_id));
        self.finished(renew, Source::Cache, id, call, now, Err(&failure));
        if self.started {
            // The ID was in use before the restart: stopping is a loss the application hears of.
            let lost = (Arc::clone(&cached.lease), cached.resume_floor_ms());
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
        Phase::acquiring(Source::Initial, now, Some(failure))
    }

    pub(super) fn acquire_failed(
        &mut self,
        source: Source,
        attempts: u32,
        call: InFlight,
        failure: Failure,
        now: u64,
    ) -> Phase<L> {
        // One retry of a failed release (if any) before the next attempt.
        self.release_retry_due = true;
        self.finished(Operation::Acquire, source, None, call, now, Err(&failure));
        if !self.started
            && matches!(
                failure.kind,
                ErrorKind::Unsupported | ErrorKind::Misconfigured
            )
        {
            return Phase::Failed(AcquireError::Fatal(failure));
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

    pub(super) fn renew_failed(
        &mut self,
        held: Held<L>,
        call: InFlight,
        source: Source,
        failures: u32,
        failure: Failure,
        now: u64,
    ) -> Phase<L> {
        let id = Some(held.machine_id);
        self.finished(Operation::Renew, source, id, call, now, Err(&failure));
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

    /// A release sent as `call` finished at `now` (`Err`: failed or timed out), the machine
    /// going on with `then`. One on the way to acquisition that did not get through is tried
    /// again after the next failed acquire attempt, before the one after it (at most
    /// `UNRELEASED_MAX` are kept: the oldest go first). One on the way to `Stopped` (shutdown)
    /// is not: the process is going away.
    pub(super) fn released(
        &mut self,
        (lease, floor_ms): (Arc<L>, u64),
        call: InFlight,
        then: Phase<L>,
        outcome: Result<(), &Failure>,
        now: u64,
    ) -> Phase<L> {
        if outcome.is_err() && !matches!(then, Phase::Stopped) {
            if self.unreleased.len() >= UNRELEASED_MAX {
                self.unreleased.remove(0);
            }
            self.unreleased.push((lease, floor_ms));
        }
        // Shutdown, or the acquisition it makes way for (a refused grant at startup, a loss).
        let source = match &then {
            Phase::Acquiring { source, .. } => *source,
            _ => Source::Shutdown,
        };
        let outcome = outcome.map(|()| None);
        self.finished(Operation::Release, source, None, call, now, outcome);
        then
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
    /// longer ours touches nobody else's (the [`Strategy`](lease_core::Strategy) contract).
    pub(super) fn lose(
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
            Phase::releasing(
                lease,
                floor_ms,
                Phase::acquiring(Source::Reacquire, now, None),
            )
        }
    }
}
