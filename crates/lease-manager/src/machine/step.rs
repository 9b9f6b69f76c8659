//! What the machine does next in each phase at `now`: the steps of
//! [`poll_action`](LeaseMachine::poll_action).

use std::sync::Arc;

use lease_core::time::millis;

use crate::Failure;

use super::phase::{Held, InFlight, Phase, RenewStep};
use super::{AcquireError, Action, Effect, LeaseMachine, LossReason, Source};

impl<L> LeaseMachine<L> {
    pub(super) fn step(&mut self, phase: Phase<L>, now: u64) -> (Phase<L>, Option<Action<L>>) {
        // A call still outstanding is waited for until its timeout (a held lease's renewal, in
        // `step_held`, no longer than the lease's deadline either).
        if let Some(call) = phase.outstanding()
            && now < call.expires()
        {
            let until = call.expires();
            return (phase, Some(Action::Wait { until }));
        }
        match phase {
            Phase::New { cached } => {
                self.startup_began = now;
                self.startup_deadline = self
                    .config
                    .acquire_timeout()
                    .map(|t| now.saturating_add(millis(t)));
                let next = match cached {
                    Some(cached) => Phase::Recovering { cached, call: None },
                    None => Phase::acquiring(Source::Initial, now, None),
                };
                (next, None)
            }
            // The outstanding calls below timed out.
            Phase::Recovering {
                cached,
                call: Some(call),
            } => {
                let failure = Failure::timeout(call.timeout);
                (self.recovery_failed(cached, call, failure, now), None)
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
                call: Some(call),
                ..
            } => {
                let failure = Failure::timeout(call.timeout);
                let next = self.acquire_failed(source, attempts, call, failure, now);
                (next, None)
            }
            Phase::Releasing {
                lease,
                floor_ms,
                call: Some(call),
                then,
            } => {
                let failure = Failure::timeout(call.timeout);
                let next = self.released((lease, floor_ms), call, *then, Err(&failure), now);
                (next, None)
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
                    let error = AcquireError::Timeout {
                        waited_ms: now.saturating_sub(self.startup_began),
                        attempts,
                        last_error,
                    };
                    return (Phase::Failed(error.clone()), Some(Action::Failed(error)));
                }
                let phase = |attempts, call| Phase::Acquiring {
                    source,
                    attempts,
                    next_at,
                    call,
                    last_error,
                };
                if now < next_at {
                    return (phase(attempts, None), Some(Action::Wait { until: next_at }));
                }
                if self.release_retry_due
                    && let Some((lease, floor_ms)) = self.unreleased.pop()
                {
                    self.release_retry_due = false;
                    // First the release that did not get through (a lost lease's floor must
                    // reach the coordinator before any successor's acquire can).
                    let then = phase(attempts, None);
                    return (Phase::releasing(lease, floor_ms, then), None);
                }
                let timeout = self.timeout(now, [self.startup_limit(), None]);
                let action = Action::Acquire {
                    source,
                    requested: self.config.lease_duration(),
                    timeout,
                    now_ms: now,
                    floor_ms: self.floor_bound(now),
                };
                let call = InFlight { sent: now, timeout };
                (phase(attempts + 1, Some(call)), Some(action))
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
            Phase::Halted => (Phase::Halted, Some(Action::Halted)),
            Phase::Failed(error) => (Phase::Failed(error.clone()), Some(Action::Failed(error))),
            Phase::Stopped => (Phase::Stopped, Some(Action::Stopped)),
        }
    }

    pub(super) fn step_held(
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
                    let failure = Failure::timeout(call.timeout);
                    let next = self.renew_failed(held, call, source, failures, failure, now);
                    return (next, None);
                }
                let wait = Action::Wait {
                    until: call.expires().min(deadline),
                };
                return (Phase::Held { held, step }, Some(wait));
            }
        };
        if now < at {
            let wait = Action::Wait {
                until: at.min(deadline),
            };
            return (Phase::Held { held, step }, Some(wait));
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
}
