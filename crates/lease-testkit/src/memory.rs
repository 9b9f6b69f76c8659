//! A reference in-memory strategy: a **test double**, not a coordinator for production.
//!
//! [`MemoryStore`] is a lease table in process memory; every [`MemoryStrategy`] made from it
//! (one per simulated node) shares that table. It follows the [`Strategy`] contract to the
//! letter and keeps time with [`tokio::time::Instant`], so tests on tokio's paused clock run
//! leases of hours in microseconds. It coordinates nothing across processes: use it to test code
//! that *drives* a strategy, and as the worked example of what the conformance suite expects.
//!
//! [`Flaw`]s make it deliberately wrong, to show that the suite catches each kind of bug.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use lease_core::{
    Acquire, ErrorKind, Grant, LeaseError, LeaseTerms, MachineId, Profile, Release, Renew, Renewal,
    Strategy,
};
use tokio::time::Instant;

use crate::Harness;

/// A deliberate bug for [`MemoryStore::with_flaw`], to prove a conformance check can fail.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Flaw {
    /// Acquire reads a free ID, yields, then claims it without checking again (check-then-act).
    RacyAcquire,
    /// Renew extends whatever lease holds the ID, without matching the token.
    RenewIgnoresToken,
    /// Renew hands out a new token, so a retried renewal with the old handle is lost.
    RenewRotatesToken,
    /// Renew of a lease that someone else took answers `Retry` instead of `Lost`.
    LostAsRetry,
    /// Release frees the ID at once, ignoring the guard.
    ReleaseFreesAtOnce,
    /// Release shortens whatever lease holds the ID, without matching the token.
    ReleaseIgnoresToken,
    /// Grants twice the requested TTL.
    OverGrantsTtl,
    /// Keeps a lease for half the TTL it reports.
    ExpiresEarly,
    /// Answers `Retry` instead of `Exhausted` when every ID is held.
    NoExhausted,
    /// Stores no timestamp floor, yet claims to (every grant reports 0).
    ForgetsFloor,
    /// Renew overwrites the floor instead of raising it, so a lower floor can replace a higher one.
    RenewLowersFloor,
    /// Acquire overwrites the floor instead of raising it, so a lower floor can replace a higher
    /// one.
    AcquireLowersFloor,
    /// A renewal of a lease that was taken over is lost, but raises the floor all the same.
    LostRenewRaisesFloor,
    /// Acquire takes the first free ID, whatever its floor and the acquirer's clock.
    IgnoresFloorPreference,
    /// Release sets the floor whoever holds the ID, without matching the token.
    ReleaseFloorIgnoresToken,
    /// Release of a lease that is no longer ours leaves the floor as it is, instead of raising
    /// it to what was issued under the lease.
    LostReleaseKeepsFloor,
    /// An acquire that lost its race for an ID (found it taken when it came to claim it) still
    /// writes its floor there, then claims another.
    LoserRecordsFloor,
    /// Release keeps the lease's token on the ID for the guard, so a renewal that arrives
    /// within the guard extends the released lease.
    RenewRevivesReleased,
}

/// An error of the in-memory strategy.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum MemoryLeaseError {
    /// Every ID of the store is leased.
    #[error("all {capacity} machine ids of the in-memory store are leased; wait for one to expire")]
    Exhausted {
        /// How many IDs the store has.
        capacity: u16,
    },
    /// The lease expired or belongs to someone else now.
    #[error("lease on machine id {id} is no longer held by this node")]
    Lost {
        /// The machine ID of the lost lease.
        id: MachineId,
    },
    /// An answer that a flawed store gives instead of the right one.
    #[error("in-memory store is flawed ({0:?}) and answers retry")]
    Flawed(Flaw),
}

impl LeaseError for MemoryLeaseError {
    fn kind(&self) -> ErrorKind {
        match self {
            Self::Exhausted { .. } => ErrorKind::Exhausted,
            Self::Lost { .. } => ErrorKind::Lost,
            Self::Flawed(_) => ErrorKind::Retry,
        }
    }
}

/// The lease handle of a [`MemoryStrategy`]: an ID and a token unique to one acquisition.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct MemoryLease {
    id: MachineId,
    token: u64,
}

impl MemoryLease {
    /// The machine ID this lease is for.
    #[must_use]
    pub const fn machine_id(&self) -> MachineId {
        self.id
    }
}

#[derive(Debug, Clone, Copy)]
struct Row {
    token: u64,
    expires_at: Instant,
    /// Released by its holder: blocked for the guard, but no longer a lease to renew.
    released: bool,
}

#[derive(Debug)]
struct Inner {
    rows: Mutex<Vec<Option<Row>>>,
    /// The timestamp floor of each ID (Unix ms): not part of a row, so it outlives expiry.
    floors: Mutex<Vec<u64>>,
    next_token: AtomicU64,
    capacity: u16,
    max_ttl: Option<Duration>,
    flaws: Vec<Flaw>,
}

/// An in-memory lease table shared by every [`MemoryStrategy`] made from it (test double).
///
/// Cloning shares the table. It is also a [`Harness`] for the conformance suite, with
/// [`Harness::expire`] supported.
#[derive(Debug, Clone)]
pub struct MemoryStore {
    inner: Arc<Inner>,
}

impl Default for MemoryStore {
    fn default() -> Self {
        Self::new()
    }
}

impl MemoryStore {
    /// A table of all 512 IDs, granting exactly the requested TTL.
    #[must_use]
    pub fn new() -> Self {
        Self::build(MachineId::COUNT, None, Vec::new())
    }

    fn build(capacity: u16, max_ttl: Option<Duration>, flaws: Vec<Flaw>) -> Self {
        Self {
            inner: Arc::new(Inner {
                rows: Mutex::new(vec![None; usize::from(capacity)]),
                floors: Mutex::new(vec![0; usize::from(capacity)]),
                capacity,
                next_token: AtomicU64::new(1),
                max_ttl,
                flaws,
            }),
        }
    }

    /// Only IDs `0..capacity` (at most 512), like a coordinator with a smaller table.
    #[must_use]
    pub fn with_capacity(self, capacity: u16) -> Self {
        Self::build(
            capacity.min(MachineId::COUNT),
            self.inner.max_ttl,
            self.inner.flaws.clone(),
        )
    }

    /// Grants at most `max_ttl`, like a coordinator that caps lease durations.
    #[must_use]
    pub fn with_max_ttl(self, max_ttl: Duration) -> Self {
        Self::build(self.inner.capacity, Some(max_ttl), self.inner.flaws.clone())
    }

    /// Adds a deliberate bug (see [`Flaw`]); for testing conformance suites only.
    #[must_use]
    pub fn with_flaw(self, flaw: Flaw) -> Self {
        let mut flaws = self.inner.flaws.clone();
        flaws.push(flaw);
        Self::build(self.inner.capacity, self.inner.max_ttl, flaws)
    }

    /// A strategy for one more node on this table.
    #[must_use]
    pub fn strategy(&self) -> MemoryStrategy {
        MemoryStrategy {
            store: self.clone(),
        }
    }

    /// Ends whatever lease holds `id` now, as if its TTL had run out.
    pub fn expire(&self, id: MachineId) {
        if let Some(row) = self
            .lock()
            .get_mut(usize::from(id.get()))
            .and_then(Option::as_mut)
        {
            row.expires_at = Instant::now();
        }
    }

    /// How many IDs are currently leased (including released IDs still in their guard interval).
    #[must_use]
    pub fn held(&self) -> usize {
        let now = Instant::now();
        self.lock()
            .iter()
            .filter(|row| row.is_some_and(|r| r.expires_at > now))
            .count()
    }

    fn lock(&self) -> MutexGuard<'_, Vec<Option<Row>>> {
        unpoisoned(&self.inner.rows)
    }

    /// The timestamp floor stored with `id` (Unix ms; 0 if none).
    #[must_use]
    pub fn floor(&self, id: MachineId) -> u64 {
        self.floors()
            .get(usize::from(id.get()))
            .copied()
            .unwrap_or(0)
    }

    fn floors(&self) -> MutexGuard<'_, Vec<u64>> {
        unpoisoned(&self.inner.floors)
    }

    /// Raises (or with `assign`, sets) the floor of `index`, unless the store forgets floors.
    fn record_floor(&self, index: usize, floor_ms: u64, assign: bool) {
        if self.has(Flaw::ForgetsFloor) {
            return;
        }
        if let Some(floor) = self.floors().get_mut(index) {
            *floor = if assign {
                floor_ms
            } else {
                (*floor).max(floor_ms)
            };
        }
    }

    fn has(&self, flaw: Flaw) -> bool {
        self.inner.flaws.contains(&flaw)
    }

    fn capacity(&self) -> u16 {
        self.inner.capacity
    }

    fn granted(&self, requested: Duration) -> Duration {
        let ttl = self
            .inner
            .max_ttl
            .map_or(requested, |max| requested.min(max));
        if self.has(Flaw::OverGrantsTtl) {
            ttl * 2
        } else {
            ttl
        }
    }

    fn kept(&self, ttl: Duration) -> Duration {
        if self.has(Flaw::ExpiresEarly) {
            ttl / 2
        } else {
            ttl
        }
    }

    fn token(&self) -> u64 {
        self.inner.next_token.fetch_add(1, Ordering::Relaxed)
    }
}

/// Locks `mutex`, even after a panic while it was held: rows and floors are `Copy`, so a panic
/// cannot leave one half-written.
fn unpoisoned<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Harness for MemoryStore {
    type Strategy = MemoryStrategy;

    async fn node(&self) -> MemoryStrategy {
        self.strategy()
    }

    async fn expire(&self, id: MachineId) -> bool {
        MemoryStore::expire(self, id);
        true
    }

    /// Ends the lease at once, as [`MemoryStore::expire`] does: the floor stays.
    async fn force_release(&self, id: MachineId) -> Option<bool> {
        let now = Instant::now();
        let held = self
            .lock()
            .get(usize::from(id.get()))
            .is_some_and(|row| row.is_some_and(|r| r.expires_at > now));
        MemoryStore::expire(self, id);
        Some(held)
    }
}

/// One node's view of a [`MemoryStore`] (test double); see the [module docs](self).
#[derive(Debug, Clone)]
pub struct MemoryStrategy {
    store: MemoryStore,
}

impl Strategy for MemoryStrategy {
    type Lease = MemoryLease;
    type Error = MemoryLeaseError;

    async fn acquire(&self, request: Acquire) -> Result<Grant<MemoryLease>, MemoryLeaseError> {
        let Acquire {
            requested,
            now_ms,
            floor_ms,
            ..
        } = request;
        let store = &self.store;
        let now = Instant::now();
        let ttl = store.granted(requested);
        let exhausted = || {
            if store.has(Flaw::NoExhausted) {
                MemoryLeaseError::Flawed(Flaw::NoExhausted)
            } else {
                MemoryLeaseError::Exhausted {
                    capacity: store.capacity(),
                }
            }
        };
        let free = |row: &Option<Row>| row.is_none_or(|r| r.expires_at <= now);
        let token = store.token();
        let claim = Some(Row {
            token,
            expires_at: now + store.kept(ttl),
            released: false,
        });
        // Prefer a free ID whose floor our clock has passed; any free ID otherwise.
        let pick = |rows: &[Option<Row>]| {
            let floors = store.floors();
            let passed = (0..rows.len()).find(|&i| {
                free(&rows[i]) && (floors[i] < now_ms || store.has(Flaw::IgnoresFloorPreference))
            });
            passed.or_else(|| rows.iter().position(free))
        };
        let index = if store.has(Flaw::RacyAcquire) || store.has(Flaw::LoserRecordsFloor) {
            loop {
                let index = pick(&store.lock()).ok_or_else(exhausted)?;
                // Another acquirer may claim it meanwhile; the claim below checks again, unless
                // the bug is to claim without checking.
                tokio::task::yield_now().await;
                let mut rows = store.lock();
                if free(&rows[index]) || store.has(Flaw::RacyAcquire) {
                    rows[index] = claim;
                    break index;
                }
                drop(rows);
                // The bug: the lost claim wrote its floor all the same.
                store.record_floor(index, floor_ms, false);
            }
        } else {
            // Check and claim under one lock, as a real coordinator does in one statement.
            let mut rows = store.lock();
            let index = pick(&rows).ok_or_else(exhausted)?;
            rows[index] = claim;
            index
        };
        let previous = if store.has(Flaw::ForgetsFloor) {
            0
        } else {
            store.floors()[index]
        };
        store.record_floor(index, floor_ms, store.has(Flaw::AcquireLowersFloor));
        let id = MachineId::new(u16::try_from(index).unwrap_or(u16::MAX))
            .expect("the store has at most one row per machine id");
        Ok(Grant::new(id, MemoryLease { id, token }, ttl).with_floor(previous))
    }

    async fn renew(
        &self,
        lease: &MemoryLease,
        request: Renew,
    ) -> Result<Renewal<MemoryLease>, MemoryLeaseError> {
        let store = &self.store;
        let now = Instant::now();
        let ttl = store.granted(request.requested);
        let mut rows = store.lock();
        let Some(row) = rows
            .get_mut(usize::from(lease.id.get()))
            .and_then(Option::as_mut)
        else {
            return Err(MemoryLeaseError::Lost { id: lease.id });
        };
        let ours = row.token == lease.token || store.has(Flaw::RenewIgnoresToken);
        // Matching the token alone would revive an expired lease nobody took yet; the contract
        // allows that, but a coordinator that dropped the row could not, so be strict.
        let released = row.released && !store.has(Flaw::RenewRevivesReleased);
        if !ours || released || row.expires_at <= now {
            if store.has(Flaw::LostRenewRaisesFloor) {
                store.record_floor(usize::from(lease.id.get()), request.floor_ms, false);
            }
            if store.has(Flaw::LostAsRetry) {
                return Err(MemoryLeaseError::Flawed(Flaw::LostAsRetry));
            }
            return Err(MemoryLeaseError::Lost { id: lease.id });
        }
        row.expires_at = now + store.kept(ttl);
        store.record_floor(
            usize::from(lease.id.get()),
            request.floor_ms,
            store.has(Flaw::RenewLowersFloor),
        );
        let mut renewed = *lease;
        if store.has(Flaw::RenewRotatesToken) {
            renewed.token = store.token();
            row.token = renewed.token;
        }
        Ok(Renewal::new(renewed, ttl))
    }

    async fn release(&self, lease: &MemoryLease, request: Release) -> Result<(), MemoryLeaseError> {
        let Release {
            guard, floor_ms, ..
        } = request;
        let store = &self.store;
        let now = Instant::now();
        let mut rows = store.lock();
        let index = usize::from(lease.id.get());
        let ours = rows
            .get(index)
            .copied()
            .flatten()
            .is_some_and(|row| row.token == lease.token);
        // Ours: the exact bound of what was issued. Not ours (a lost lease): only ever raised.
        if ours || store.has(Flaw::ReleaseFloorIgnoresToken) {
            store.record_floor(index, floor_ms, true);
        } else if !store.has(Flaw::LostReleaseKeepsFloor) {
            store.record_floor(index, floor_ms, false);
        }
        if let Some(row) = rows.get_mut(index).and_then(Option::as_mut)
            && (row.token == lease.token || store.has(Flaw::ReleaseIgnoresToken))
        {
            let until = if store.has(Flaw::ReleaseFreesAtOnce) {
                now
            } else {
                now + guard
            };
            // Never lengthen a lease by releasing it.
            row.expires_at = row.expires_at.min(until);
            row.released = true;
        }
        Ok(())
    }

    fn check_terms(&self, _terms: &LeaseTerms) -> Result<(), MemoryLeaseError> {
        Ok(())
    }

    fn profile(&self) -> Profile {
        Profile::new("memory").recording_floor()
    }
}
