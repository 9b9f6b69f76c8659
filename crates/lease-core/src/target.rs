//! What the lease manager switches on and off: nonce factories, or anything else keyed to the ID.

use std::sync::Arc;

/// Something that may only act while the lease is held, such as a nonce factory.
///
/// The manager calls these from its own task; they must be quick and must not block.
/// `deadline_ms` is exclusive and in the manager clock's milliseconds (the factories' clock):
/// the target must refuse to act at or after it, even if the manager is starved or frozen.
pub trait LeaseTarget: Send + Sync {
    /// Start (or restart) acting as `machine_id` until `deadline_ms`.
    fn enable(&self, machine_id: u16, deadline_ms: u64);
    /// Move the deadline (after a renewal; it may move earlier).
    fn extend_deadline(&self, deadline_ms: u64);
    /// Stop acting now.
    fn disable(&self);
}

impl<T: LeaseTarget + ?Sized> LeaseTarget for Arc<T> {
    fn enable(&self, machine_id: u16, deadline_ms: u64) {
        (**self).enable(machine_id, deadline_ms);
    }
    fn extend_deadline(&self, deadline_ms: u64) {
        (**self).extend_deadline(deadline_ms);
    }
    fn disable(&self) {
        (**self).disable();
    }
}

impl<T: LeaseTarget + ?Sized> LeaseTarget for &T {
    fn enable(&self, machine_id: u16, deadline_ms: u64) {
        (**self).enable(machine_id, deadline_ms);
    }
    fn extend_deadline(&self, deadline_ms: u64) {
        (**self).extend_deadline(deadline_ms);
    }
    fn disable(&self) {
        (**self).disable();
    }
}

/// A nonce factory follows the lease: enabled with the ID and deadline, disabled on loss.
impl<C: nonce_core::Clock + Send + Sync> LeaseTarget for nonce_core::Factory<C> {
    fn enable(&self, machine_id: u16, deadline_ms: u64) {
        // A factory that cannot be enabled (timestamp overflow) stays off: never unsafe.
        if self.enable(machine_id, deadline_ms).is_err() {
            self.disable();
        }
    }
    fn extend_deadline(&self, deadline_ms: u64) {
        self.set_deadline(deadline_ms);
    }
    fn disable(&self) {
        nonce_core::Factory::disable(self);
    }
}
