//! A backend's own strategy as the simulation runs it: over a [`SimTransport`], wrapped in a
//! [`Client`] that makes its leases the simulation's handles and switches the guards it has no
//! switch for.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use lease_core::{
    Acquire, ErrorKind, Grant, LeaseTerms, Profile, Release, Renew, Renewal, Strategy,
};
use lease_manager::Failure;

use super::{Guards, Link, ModelLease};
use crate::rng::Rng;

/// A backend's transport in the simulation: its requests over a [`Link`], the link's clock
/// (the node's) for the client's timers, and random numbers from a generator seeded by the
/// run. Each backend's module implements the backend's `Transport` for it.
#[derive(Debug)]
pub struct SimTransport<L> {
    pub(super) link: L,
    rng: Mutex<Rng>,
}

impl<L: Link> SimTransport<L> {
    /// Requests over `link`, random numbers from `seed`.
    pub fn new(link: L, seed: u64) -> Self {
        Self {
            link,
            rng: Mutex::new(Rng::new(seed)),
        }
    }

    /// The next random number.
    pub(super) fn next_random(&self) -> u64 {
        self.rng
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .next_u64()
    }
}

/// The leases one run's backend hands out, by the simulation's handle: every node's client
/// finds the lease of a handle it resumes from its cache, whichever process acquired it.
pub type Handles<L> = Arc<Mutex<BTreeMap<u128, L>>>;

/// A backend strategy the simulation runs: what tells its leases apart, and what its guard
/// switches do beyond the floors every client masks.
pub trait Simulated: Strategy<Lease: Clone, Error: Sync> + Sync {
    /// 128 bits that tell `lease` from every other lease of the run.
    ///
    /// # Errors
    /// When the lease carries no such bits (a backend bug).
    fn key(lease: &Self::Lease) -> Result<u128, Failure>;

    /// A release with the release guard off: by default with a guard of 0, which frees the ID
    /// at once.
    fn release_unguarded(
        &self,
        lease: &Self::Lease,
        request: Release,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send {
        self.release(lease, Release::new(Duration::ZERO, request.floor_ms))
    }

    /// After an acquisition that found nothing with the amnesia guard off: what a starting
    /// node would have done about it (by default nothing). Whether to try again.
    fn found_nothing_unguarded(&self) -> impl Future<Output = Result<bool, Failure>> + Send {
        async { Ok(false) }
    }
}

/// Backend strategy `S` with the simulation's guard switches: the floor off sends floors and
/// clock as 0 and reports 0 with every grant; the release guard off releases as
/// [`Simulated::release_unguarded`] does; the amnesia and marker switches are the backend's own
/// setting or its server model's. Its leases are the simulation's handles ([`ModelLease`]).
pub struct Client<S: Strategy> {
    strategy: S,
    guards: Guards,
    handles: Handles<S::Lease>,
}

impl<S: Strategy> std::fmt::Debug for Client<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("guards", &self.guards)
            .finish_non_exhaustive()
    }
}

impl<S: Simulated> Client<S> {
    /// `strategy` with `guards`, its leases recorded in `handles`.
    pub const fn new(strategy: S, guards: Guards, handles: Handles<S::Lease>) -> Self {
        Self {
            strategy,
            guards,
            handles,
        }
    }

    /// The backend's strategy.
    pub const fn strategy(&self) -> &S {
        &self.strategy
    }

    fn handles(&self) -> MutexGuard<'_, BTreeMap<u128, S::Lease>> {
        self.handles.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The handle of the lease on `id`, recorded.
    fn handle(&self, id: lease_core::MachineId, lease: &S::Lease) -> Result<ModelLease, Failure> {
        let token = S::key(lease)?;
        self.handles().insert(token, lease.clone());
        Ok(ModelLease { id, token })
    }

    /// The lease of `handle`.
    fn lease(&self, handle: &ModelLease) -> Result<S::Lease, Failure> {
        self.handles().get(&handle.token).cloned().ok_or_else(|| {
            Failure::new(
                ErrorKind::Other,
                format!("no lease was handed out as {:x}", handle.token),
            )
        })
    }

    async fn acquire_once(&self, request: Acquire) -> Result<Grant<S::Lease>, Failure> {
        self.strategy
            .acquire(request)
            .await
            .map_err(|e| Failure::from_error(&e))
    }
}

impl<S: Simulated> Strategy for Client<S> {
    type Lease = ModelLease;
    type Error = Failure;

    async fn acquire(&self, request: Acquire) -> Result<Grant<ModelLease>, Failure> {
        let guards = self.guards;
        let request = Acquire::new(
            request.requested,
            guards.floor_ms(request.now_ms),
            guards.floor_ms(request.floor_ms),
        );
        let mut result = self.acquire_once(request).await;
        if let Err(e) = &result
            && !guards.amnesia
            && matches!(e.kind, ErrorKind::Exhausted | ErrorKind::Conflict)
            && self.strategy.found_nothing_unguarded().await?
        {
            result = self.acquire_once(request).await;
        }
        let grant = result?;
        let handle = self.handle(grant.machine_id, &grant.lease)?;
        let floor = guards.floor_ms(grant.floor_ms);
        let mut grant = grant.map_lease(|_| handle);
        grant.floor_ms = floor;
        Ok(grant)
    }

    async fn renew(
        &self,
        handle: &ModelLease,
        request: Renew,
    ) -> Result<Renewal<ModelLease>, Failure> {
        let lease = self.lease(handle)?;
        let request = Renew::new(request.requested, self.guards.floor_ms(request.floor_ms));
        let renewal = self
            .strategy
            .renew(&lease, request)
            .await
            .map_err(|e| Failure::from_error(&e))?;
        let renewed = self.handle(handle.id, &renewal.lease)?;
        Ok(renewal.map_lease(|_| renewed))
    }

    async fn release(&self, handle: &ModelLease, request: Release) -> Result<(), Failure> {
        let lease = self.lease(handle)?;
        let request = Release::new(request.guard, self.guards.floor_ms(request.floor_ms));
        let released = if self.guards.release_guard {
            self.strategy.release(&lease, request).await
        } else {
            self.strategy.release_unguarded(&lease, request).await
        };
        released.map_err(|e| Failure::from_error(&e))
    }

    fn check_terms(&self, terms: &LeaseTerms) -> Result<(), Failure> {
        self.strategy
            .check_terms(terms)
            .map_err(|e| Failure::from_error(&e))
    }

    fn profile(&self) -> Profile {
        self.guards.profile(self.strategy.profile().name)
    }
}
