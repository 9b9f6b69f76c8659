//! The machine's lease arithmetic: deadlines and floors of a grant, when to renew, how long a
//! call may take, and the clock checks on the coordinator's readings.

use std::time::Duration;

use lease_core::time::{local_deadline, millis};

use super::phase::Held;
use super::{LeaseMachine, LossReason};

impl<L> LeaseMachine<L> {
    /// The local deadline of a grant sent at `sent` with `ttl_ms`, or why the TTL is illegal.
    pub(super) fn deadline_for(&self, sent: u64, ttl_ms: u64) -> Result<u64, LossReason> {
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
    pub(super) fn floor_bound(&self, sent: u64) -> u64 {
        local_deadline(sent, self.config.lease_duration(), self.config.margin())
    }

    /// A coordinator clock that ran ahead of our own elapsed time by more than the margin since
    /// the last reading. The coordinator applied the last call no earlier than its `sent` and
    /// this one no later than `now`, so its clock may advance by at most `now - sent` (plus the
    /// margin, which also absorbs rate drift). Backward steps only lengthen leases: not a loss.
    pub(super) fn clock_jump(
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
    pub(super) fn clock_offset(
        sent: u64,
        now: u64,
        coordinator_ms: Option<u64>,
        max: Option<Duration>,
    ) -> Option<LossReason> {
        let (coordinator_ms, max_ms) = (coordinator_ms?, millis(max?));
        let ahead_ms = now.saturating_sub(coordinator_ms);
        let (ahead, offset_ms) = if ahead_ms > max_ms {
            (true, ahead_ms)
        } else {
            (false, coordinator_ms.saturating_sub(sent))
        };
        (offset_ms > max_ms).then_some(LossReason::ClockOffset {
            ahead,
            offset_ms,
            max_ms,
        })
    }

    /// `sent + min(renew_interval, ttl - margin) - margin`; positive by config validation.
    pub(super) fn next_renewal(&self, sent: u64, ttl_ms: u64) -> u64 {
        let margin = millis(self.config.margin());
        let safe_ttl = ttl_ms.saturating_sub(margin);
        sent.saturating_add(
            millis(self.config.renew_interval())
                .min(safe_ttl)
                .saturating_sub(margin),
        )
    }

    /// The call timeout, shortened so the call ends by every given limit (absolute ms).
    pub(super) fn timeout(&self, now: u64, limits: [Option<u64>; 2]) -> Duration {
        let mut timeout = millis(self.config.call_timeout());
        for limit in limits.into_iter().flatten() {
            timeout = timeout.min(limit.saturating_sub(now));
        }
        Duration::from_millis(timeout)
    }

    pub(super) fn startup_limit(&self) -> Option<u64> {
        if self.started {
            None
        } else {
            self.startup_deadline
        }
    }
}
