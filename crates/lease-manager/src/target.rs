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
pub trait LeaseTarget: Send + Sync {
    /// Start (or restart) acting as `machine_id` until `deadline_ms`, with every timestamp
    /// strictly above `floor_ms` (Unix ms; earlier holders of the ID issued up to it).
    fn enable(&self, machine_id: MachineId, floor_ms: u64, deadline_ms: u64);
    /// Move the deadline (after a renewal; it may move earlier).
    fn extend_deadline(&self, deadline_ms: u64);
    /// Stop acting now.
    fn disable(&self);
    /// An upper bound (clock ms) of every timestamp this target has issued, exact once it is
    /// disabled; at least the `floor_ms` of its last enable. A target that issues no
    /// timestamps returns 0. The manager records it as the ID's floor when it releases.
    fn issued_up_to_ms(&self) -> u64;
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
}

impl<T: LeaseTarget + ?Sized> LeaseTarget for &T {
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
}

/// A nonce factory follows the lease: enabled with the ID, floor and deadline, disabled on loss.
impl<C: nonce_core::Clock + Send + Sync> LeaseTarget for nonce_core::Factory<C> {
    fn enable(&self, machine_id: MachineId, floor_ms: u64, deadline_ms: u64) {
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
        nonce_core::Factory::issued_up_to_ms(self)
    }
}
