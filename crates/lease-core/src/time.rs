//! The lease arithmetic the machine, the driver and the strategies share: durations in
//! milliseconds, the local deadline of a grant, the floor a shortened grant may record, and how
//! long a store that may have forgotten leases holds acquisitions off.
//!
//! ```
//! use std::time::Duration;
//! use lease_core::time::{granted_floor, local_deadline, millis};
//!
//! let (sent, margin) = (1_000_000, Duration::from_secs(10));
//! // A request for 8 h records this floor: the latest deadline its grant can give.
//! let floor = local_deadline(sent, Duration::from_secs(8 * 3600), margin);
//! // The coordinator granted 1 h only: the deadline counts from that, and the floor the
//! // strategy records instead still bounds it.
//! let deadline = local_deadline(sent, Duration::from_secs(3600), margin);
//! assert_eq!(deadline, sent + 3_600_000 - 10_000);
//! let recorded = granted_floor(floor, Duration::from_secs(8 * 3600), Duration::from_secs(3600));
//! assert_eq!(recorded, deadline);
//! assert_eq!(millis(Duration::MAX), u64::MAX);
//!
//! // A store that lost its leases (a restart, a failover, a flush) waits out the longest lease
//! // and twice the clock offset nodes are held to.
//! use lease_core::time::amnesia_hold_off;
//! let hold_off = amnesia_hold_off(Duration::from_secs(8 * 3600), Duration::from_secs(3600));
//! assert_eq!(hold_off, Duration::from_secs(10 * 3600));
//! ```

use std::time::Duration;

/// Whole milliseconds of `d` (rounded down), saturating at `u64::MAX`: 584 million years, so
/// only `Duration::MAX`-like values saturate.
#[must_use]
pub fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// The local deadline of a lease granted for `ttl` on a request sent at `sent_ms` (this node's
/// clock, ms): `sent + ttl - margin`, saturating.
///
/// Counted from when the request was *sent*, so a slow reply can only shorten the lease: the
/// coordinator started its TTL no earlier. The margin absorbs clock rate differences between
/// this node and the coordinator. The lease machine sets this deadline on every grant and
/// renewal (capped at the floor the request recorded), and records the same formula for the
/// requested duration as the request's floor, the latest deadline its grant can give.
#[must_use]
pub fn local_deadline(sent_ms: u64, ttl: Duration, margin: Duration) -> u64 {
    sent_ms.saturating_add(millis(ttl).saturating_sub(millis(margin)))
}

/// The floor a strategy may record for a grant of `granted` on a request for `requested` whose
/// floor is `floor_ms`: the floor less what the strategy cut off, `requested - granted`.
///
/// The lease machine passes `floor_ms = local_deadline(sent, requested, margin)` and sets its
/// deadline to at most `local_deadline(sent, granted, margin)`; the two differ by exactly
/// `requested - granted` (for any grant longer than the margin: the machine refuses shorter
/// ones as an illegal TTL), so the lowered floor still bounds every timestamp issued under the
/// grant, while `floor_ms` itself would leave a floor that far ahead of anything issued (see
/// "Timestamp floor" on [`Strategy`](crate::Strategy)).
#[must_use]
pub fn granted_floor(floor_ms: u64, requested: Duration, granted: Duration) -> u64 {
    floor_ms.saturating_sub(millis(requested.saturating_sub(granted)))
}

/// How long a store that may have forgotten leases (a restart without persistence, a failover
/// to a lagging replica, a flush or deletion of the lease data while it stayed up) holds
/// acquisitions off: `max_lease + 2 × max_clock_offset`, saturating.
///
/// By the end of the longest lease every holder of a forgotten lease has stopped issuing
/// (its local deadline comes first); its timestamps reach at most its own clock then, which is
/// up to `max_clock_offset` ahead of the store's, and a successor starts at its own clock, up to
/// `max_clock_offset` behind: twice the offset later, the successor's clock is past every
/// timestamp the forgotten holder issued, although the store forgot its floor too.
#[must_use]
pub const fn amnesia_hold_off(max_lease: Duration, max_clock_offset: Duration) -> Duration {
    max_lease.saturating_add(max_clock_offset.saturating_mul(2))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn millis_round_down_and_deadlines_saturate_instead_of_wrapping() {
        assert_eq!(millis(Duration::from_micros(1_999)), 1);
        assert_eq!(millis(Duration::from_secs(u64::MAX)), u64::MAX);
        let margin = Duration::from_secs(10);
        assert_eq!(
            local_deadline(u64::MAX - 1, Duration::MAX, margin),
            u64::MAX
        );
        // A TTL within the margin leaves nothing: the deadline is the send instant.
        assert_eq!(local_deadline(500, Duration::from_secs(3), margin), 500);
        assert_eq!(granted_floor(5, Duration::from_secs(9), Duration::ZERO), 0);
        // A grant longer than asked lowers nothing.
        assert_eq!(granted_floor(5, Duration::ZERO, Duration::from_secs(9)), 5);
    }

    proptest! {
        /// The floor recorded for a shortened grant (still longer than the margin, as every
        /// legal grant is) is never below the deadline of that grant.
        #[test]
        fn a_shortened_grant_s_floor_bounds_its_deadline(
            sent in 0u64..1 << 50,
            margin_ms in 0u64..1 << 30,
            granted_above_margin in 0u64..1 << 40,
            cut_off in 0u64..1 << 40,
        ) {
            let granted_ms = margin_ms + granted_above_margin;
            let (requested, granted, margin) = (
                Duration::from_millis(granted_ms + cut_off),
                Duration::from_millis(granted_ms),
                Duration::from_millis(margin_ms),
            );
            let floor = granted_floor(local_deadline(sent, requested, margin), requested, granted);
            prop_assert!(floor >= local_deadline(sent, granted, margin));
        }
    }
}
