//! The in-memory lease cache that lets a restarted manager renew instead of re-acquire.

use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use nonce_core::MachineId;

/// The last lease a manager held: enough to try renewing it after the manager restarts.
#[derive(Debug)]
pub struct CachedLease<L> {
    /// The ID the lease grants.
    pub machine_id: MachineId,
    /// The strategy's lease handle.
    pub lease: Arc<L>,
    /// The local deadline (exclusive) in the manager clock's milliseconds.
    pub deadline_ms: u64,
    /// The TTL of the last grant or renewal.
    pub ttl: Duration,
    /// The timestamp floor the lease was granted with (the floors' terms, see `LeaseTarget`).
    pub floor_ms: u64,
    /// An upper bound (the floors' terms) of every timestamp the factories of the managers
    /// that held this lease issued, 0 when none reported one: raised on every renewal, when a
    /// manager is dropped or shut down and after a panic. A manager resuming the lease with new
    /// factories starts them above it (as above the floor): a floor ahead of the clock, or a
    /// resume in the same millisecond, would otherwise give them the earlier factories' values
    /// again.
    pub issued_up_to_ms: u64,
}

impl<L> CachedLease<L> {
    /// What a manager resuming this lease starts its factories above, and never releases it
    /// with less than: the granted floor or what was issued under the lease, the larger.
    pub(crate) fn resume_floor_ms(&self) -> u64 {
        self.floor_ms.max(self.issued_up_to_ms)
    }
}

// Manual impl: `L` itself need not be `Clone` behind the `Arc`.
impl<L> Clone for CachedLease<L> {
    fn clone(&self) -> Self {
        Self {
            machine_id: self.machine_id,
            lease: Arc::clone(&self.lease),
            deadline_ms: self.deadline_ms,
            ttl: self.ttl,
            floor_ms: self.floor_ms,
            issued_up_to_ms: self.issued_up_to_ms,
        }
    }
}

/// A shared slot holding the last lease; clones share the slot.
///
/// It lives in memory only: it outlives a crashed manager (keep a clone, build the next manager
/// with it) but not the process. After a process crash the coordinator's expiry is the truth,
/// which is exactly what a durable cache would get wrong.
pub struct LeaseCache<L> {
    slot: Arc<Mutex<Option<CachedLease<L>>>>,
}

impl<L> LeaseCache<L> {
    /// An empty cache.
    #[must_use]
    pub fn new() -> Self {
        Self {
            slot: Arc::new(Mutex::new(None)),
        }
    }

    /// Stores `lease`, replacing what was there.
    pub fn store(&self, lease: CachedLease<L>) {
        *self.lock() = Some(lease);
    }

    /// Raises the cached lease's [`issued_up_to_ms`](CachedLease::issued_up_to_ms) to
    /// `issued_up_to_ms`; nothing when no lease is cached. The tokio driver calls it with what
    /// its targets report after every renewal, when it is dropped or shut down and after a
    /// panic; a driver of one's own over [`LeaseMachine`](crate::LeaseMachine) does the same,
    /// so that a manager resumed from the cache with new factories starts them above it.
    pub fn record_issued(&self, issued_up_to_ms: u64) {
        if let Some(cached) = self.lock().as_mut() {
            cached.issued_up_to_ms = cached.issued_up_to_ms.max(issued_up_to_ms);
        }
    }

    /// Forgets the cached lease.
    pub fn clear(&self) {
        *self.lock() = None;
    }

    /// A copy of the cached lease.
    #[must_use]
    pub fn get(&self) -> Option<CachedLease<L>> {
        self.lock().clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<CachedLease<L>>> {
        // A panic while holding this lock cannot leave a half-written Option: keep going.
        self.slot.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl<L> Clone for LeaseCache<L> {
    fn clone(&self) -> Self {
        Self {
            slot: Arc::clone(&self.slot),
        }
    }
}

impl<L> Default for LeaseCache<L> {
    fn default() -> Self {
        Self::new()
    }
}

impl<L> fmt::Debug for LeaseCache<L> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let held = self.lock().as_ref().map(|c| (c.machine_id, c.deadline_ms));
        f.debug_struct("LeaseCache").field("held", &held).finish()
    }
}
