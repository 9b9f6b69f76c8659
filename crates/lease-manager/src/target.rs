//! What the lease manager switches on and off: nonce factories, or anything else keyed to the ID.

use std::sync::Arc;

use nonce_core::MachineId;

/// Something that may only act while the lease is held, such as a nonce factory.
///
/// The manager calls these from its own task; they must be quick and must not block.
/// `deadline_ms` is exclusive and in the manager clock's milliseconds (the factories' clock):
/// the target must refuse to act at or after it, even if the manager is starved or frozen.
///
/// A target that issues timestamps must keep every one of them strictly above `floor_ms` of
/// its last `enable` and report a bound of what it issued in
/// [`issued_up_to_ms`](LeaseTarget::issued_up_to_ms): the two carry the ID's timestamp range
/// from one holder to the next, whatever their clocks say.
///
/// Floors are in the fleet's terms, which every holder of an ID shares whatever its settings:
/// a timestamp as the nonces carry it, plus the default epoch
/// ([`DEFAULT_EPOCH_MS`](nonce_core::DEFAULT_EPOCH_MS)), which for a factory on the default
/// epoch is the Unix millisecond. A nonce factory counting from another epoch converts (see
/// [`floor_of`](LeaseTarget::floor_of)): a successor on a later epoch then starts above its
/// predecessor's timestamps, not above the same Unix millisecond, which its timestamps had
/// passed long before.
pub trait LeaseTarget: Send + Sync {
    /// Start (or restart) acting as `machine_id` until `deadline_ms`, with every timestamp
    /// strictly above `floor_ms` (the fleet's terms; earlier holders of the ID issued up to it).
    fn enable(&self, machine_id: MachineId, floor_ms: u64, deadline_ms: u64);
    /// Move the deadline (after a renewal; it may move earlier).
    fn extend_deadline(&self, deadline_ms: u64);
    /// Stop acting now.
    fn disable(&self);
    /// An upper bound (the fleet's terms) of every timestamp this target has issued, exact
    /// once it is disabled; at least the `floor_ms` of its last enable. A target that issues
    /// no timestamps returns 0. The manager records it as the ID's floor when it releases.
    fn issued_up_to_ms(&self) -> u64;
    /// Clock millisecond `clock_ms` in the fleet's terms: the floor that covers what this
    /// target may issue up to it (the manager's deadlines, sent as floors with an acquire or
    /// renewal). The clock's millisecond itself by default; a nonce factory shifts it by how
    /// far its epoch lies from the default one.
    fn floor_of(&self, clock_ms: u64) -> u64 {
        clock_ms
    }
}

impl<T: LeaseTarget + ?Sized> LeaseTarget for Arc<T> {
    fn enable(&self, machine_id: MachineId, floor_ms: u64, deadline_ms: u64) {
        (**self).enable(machine_id, floor_ms, deadline_ms);
    }
    fn extend_deadline(&self, deadline_ms: u64) {
        (**self).extend_deadline(deadline_ms);
    }
    fn disable(&self) {
        (**self).disable();
    }
    fn issued_up_to_ms(&self) -> u64 {
        (**self).issued_up_to_ms()
    }
    fn floor_of(&self, clock_ms: u64) -> u64 {
        (**self).floor_of(clock_ms)
    }
}

/// Clock milliseconds (or a timestamp decoded to Unix milliseconds) of a factory counting from
/// `epoch_ms`, in the floors' terms: its timestamp plus the default epoch. Saturating at 0 and
/// `u64::MAX`. On the default epoch it is the clock's millisecond itself.
///
/// ```
/// use lease_manager::floor_terms;
/// use nonce_core::DEFAULT_EPOCH_MS;
///
/// assert_eq!(floor_terms(DEFAULT_EPOCH_MS + 5, DEFAULT_EPOCH_MS), DEFAULT_EPOCH_MS + 5);
/// // Ten minutes later: its timestamp at the same clock reading is ten minutes lower.
/// let ten_minutes_later = DEFAULT_EPOCH_MS + 600_000;
/// assert_eq!(floor_terms(DEFAULT_EPOCH_MS + 600_005, ten_minutes_later), DEFAULT_EPOCH_MS + 5);
/// ```
#[must_use]
pub fn floor_terms(clock_ms: u64, epoch_ms: u64) -> u64 {
    shift(clock_ms, nonce_core::DEFAULT_EPOCH_MS, epoch_ms)
}

fn from_fleet(fleet_ms: u64, epoch_ms: u64) -> u64 {
    shift(fleet_ms, epoch_ms, nonce_core::DEFAULT_EPOCH_MS)
}

/// `ms + plus - minus`, saturating.
fn shift(ms: u64, plus: u64, minus: u64) -> u64 {
    let shifted = i128::from(ms) + i128::from(plus) - i128::from(minus);
    u64::try_from(shifted.max(0)).unwrap_or(u64::MAX)
}

/// A nonce factory follows the lease: enabled with the ID, floor and deadline, disabled on loss.
/// Its floors are converted between its epoch and the fleet's terms.
impl<C: nonce_core::Clock + Send + Sync> LeaseTarget for nonce_core::Factory<C> {
    fn enable(&self, machine_id: MachineId, floor_ms: u64, deadline_ms: u64) {
        // A floor the saturation brought to 0 was below every timestamp of this epoch.
        let floor_ms = from_fleet(floor_ms, self.epoch_ms());
        // A factory that cannot be enabled (timestamp overflow) stays off: never unsafe.
        if self
            .enable_above(machine_id, floor_ms, deadline_ms)
            .is_err()
        {
            self.disable();
        }
    }
    fn extend_deadline(&self, deadline_ms: u64) {
        self.set_deadline(deadline_ms);
    }
    fn disable(&self) {
        nonce_core::Factory::disable(self);
    }
    fn issued_up_to_ms(&self) -> u64 {
        match nonce_core::Factory::issued_up_to_ms(self) {
            // Never enabled: nothing issued, in any terms.
            0 => 0,
            issued => floor_terms(issued, self.epoch_ms()),
        }
    }
    fn floor_of(&self, clock_ms: u64) -> u64 {
        floor_terms(clock_ms, self.epoch_ms())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_epoch_keeps_unix_milliseconds_and_others_shift() {
        let d = nonce_core::DEFAULT_EPOCH_MS;
        assert_eq!(floor_terms(d + 5, d), d + 5);
        assert_eq!(from_fleet(d + 5, d), d + 5);
        // Ten minutes later: its timestamp at a clock reading is ten minutes lower.
        assert_eq!(floor_terms(d + 600_005, d + 600_000), d + 5);
        assert_eq!(from_fleet(d + 5, d + 600_000), d + 600_005);
        assert_eq!(floor_terms(3, d + 600_000), 0);
        assert_eq!(from_fleet(u64::MAX - 1, d + 2), u64::MAX);
    }
}
