//! A third-party lease strategy, written against `lease-core` alone.
//!
//! `Table` coordinates lease managers that share one process (a test rig, or one process
//! hosting several tenants): a table of 512 rows, each with an owner token, an expiry and a
//! timestamp floor. It follows the `Strategy` contract the way a database-backed strategy would:
//! the coordinator's clock decides expiry, each call is one atomic write (one lock), renewals
//! match the owner's token, release keeps the ID blocked for the guard interval, and each ID's
//! floor travels from one holder to the next. It implements `StoreAdmin` too, for the operator
//! commands. `tests/conformance.rs` runs the `lease-testkit` suite against it, and
//! `docs/implementing-a-strategy.md` walks through the contract.

#![forbid(unsafe_code)]

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use lease_core::{
    Acquire, ErrorKind, Grant, Holder, LeaseError, LeaseTerms, MachineId, Migration, Profile,
    Release, Renew, Renewal, StoreAdmin, Strategy,
};
use tokio::time::Instant;

const IDS: usize = MachineId::COUNT as usize;

#[derive(Clone, Copy)]
struct Row {
    /// The token of the last acquisition of this ID (0: never acquired).
    token: u64,
    /// When the lease ends on the table's clock; `None` or past: free.
    expires_at: Option<Instant>,
    /// Released by its holder: blocked until the guard ends, but no lease to renew any more (a
    /// renewal that arrives after the release must not revive it).
    released: bool,
    /// The timestamp floor: an upper bound of every timestamp any holder of this ID may have
    /// issued. Not part of the lease, so expiry, release and force release keep it.
    floor_ms: u64,
}

impl Row {
    fn is_free(&self, now: Instant) -> bool {
        self.expires_at.is_none_or(|at| at <= now)
    }
}

struct Inner {
    rows: [Row; IDS],
    next_token: u64,
}

/// The shared table; clone it into every node's strategy.
#[derive(Clone)]
pub struct Table {
    inner: Arc<Mutex<Inner>>,
}

impl Default for Table {
    fn default() -> Self {
        Self::new()
    }
}

impl Table {
    /// An empty table: every ID free, no floor stored.
    pub fn new() -> Self {
        let row = Row {
            token: 0,
            expires_at: None,
            released: false,
            floor_ms: 0,
        };
        Self {
            inner: Arc::new(Mutex::new(Inner {
                rows: [row; IDS],
                next_token: 1,
            })),
        }
    }

    /// Ends the lease on `id` at once, as if its TTL had run out; its floor stays.
    pub fn expire(&self, id: MachineId) {
        let mut inner = self.lock();
        let row = &mut inner.rows[usize::from(id.get())];
        if !row.is_free(Instant::now()) {
            row.expires_at = Some(Instant::now());
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // Every write leaves the rows whole (they are `Copy`), so a panic elsewhere while the
        // lock was held left nothing half-written.
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// A lease on one row: the ID and the owner token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TableLease {
    id: MachineId,
    token: u64,
}

/// Why the table refused.
#[derive(Debug, thiserror::Error)]
pub enum TableError {
    /// Every ID is held.
    #[error(
        "all {} machine ids are leased; free a dead node's id or wait for a lease to expire",
        MachineId::COUNT
    )]
    Exhausted,
    /// The lease expired and the row has a new owner, or was released.
    #[error("machine id {0} is no longer leased by this node")]
    Lost(MachineId),
}

impl LeaseError for TableError {
    fn kind(&self) -> ErrorKind {
        match self {
            Self::Exhausted => ErrorKind::Exhausted,
            Self::Lost(_) => ErrorKind::Lost,
        }
    }
}

fn machine_id(index: usize) -> MachineId {
    u16::try_from(index)
        .ok()
        .and_then(|n| MachineId::new(n).ok())
        .expect("index < IDS, the number of machine ids")
}

impl Strategy for Table {
    type Lease = TableLease;
    type Error = TableError;

    async fn acquire(&self, request: Acquire) -> Result<Grant<TableLease>, TableError> {
        let now = Instant::now();
        let mut inner = self.lock();
        // Start the search at a spot that varies per call, so nodes starting together spread out.
        let start =
            usize::try_from(inner.next_token.wrapping_mul(0x9E37_79B9) % IDS as u64).unwrap_or(0);
        let rows = &inner.rows;
        let free = || {
            (0..IDS)
                .map(move |i| (start + i) % IDS)
                .filter(move |&i| rows[i].is_free(now))
        };
        // Prefer an ID whose floor the acquirer's clock has passed: its factories start without
        // waiting. Otherwise the lowest floor, the shortest wait.
        let index = free()
            .find(|&i| rows[i].floor_ms < request.now_ms)
            .or_else(|| free().min_by_key(|&i| rows[i].floor_ms))
            .ok_or(TableError::Exhausted)?;
        let token = inner.next_token;
        inner.next_token += 1;
        let row = &mut inner.rows[index];
        // The claim and the floor's raise in one write; the grant reports the floor before it.
        let before = row.floor_ms;
        *row = Row {
            token,
            expires_at: Some(now + request.requested),
            released: false,
            floor_ms: before.max(request.floor_ms),
        };
        let id = machine_id(index);
        Ok(Grant::new(id, TableLease { id, token }, request.requested).with_floor(before))
    }

    async fn renew(
        &self,
        lease: &TableLease,
        request: Renew,
    ) -> Result<Renewal<TableLease>, TableError> {
        let now = Instant::now();
        let mut inner = self.lock();
        let row = &mut inner.rows[usize::from(lease.id.get())];
        // The token, not a version: a retried renewal whose first answer was lost still matches.
        if row.token != lease.token || row.released || row.is_free(now) {
            return Err(TableError::Lost(lease.id));
        }
        row.expires_at = Some(now + request.requested);
        row.floor_ms = row.floor_ms.max(request.floor_ms);
        Ok(Renewal::new(*lease, request.requested))
    }

    async fn release(&self, lease: &TableLease, request: Release) -> Result<(), TableError> {
        let now = Instant::now();
        let mut inner = self.lock();
        let row = &mut inner.rows[usize::from(lease.id.get())];
        if row.token == lease.token {
            // Ours (nobody acquired the ID since): the exact bound of what we issued.
            row.floor_ms = request.floor_ms;
            // Never sooner than the guard: a successor must not start in our last milliseconds.
            if !row.is_free(now) {
                let until = now + request.guard;
                row.expires_at = Some(row.expires_at.map_or(until, |at| at.min(until)));
            }
            row.released = true;
        } else {
            // Lost to another holder: leave its lease alone, but never forget what we issued.
            row.floor_ms = row.floor_ms.max(request.floor_ms);
        }
        Ok(())
    }

    /// Grants whatever is asked: no terms to refuse.
    fn check_terms(&self, _terms: &LeaseTerms) -> Result<(), TableError> {
        Ok(())
    }

    fn profile(&self) -> Profile {
        Profile::new("table").recording_floor()
    }
}

/// The operator commands (`nononce leases list`, `release`, `migrate` call them through
/// `DynStoreAdmin`).
impl StoreAdmin for Table {
    type Error = TableError;

    async fn holders(&self) -> Result<Vec<Holder>, TableError> {
        let now = Instant::now();
        let inner = self.lock();
        Ok((0..IDS)
            .filter_map(|i| {
                let row = &inner.rows[i];
                let left = row.expires_at?.checked_duration_since(now)?;
                (!left.is_zero()).then(|| Holder::new(machine_id(i), &row.token.to_string(), left))
            })
            .collect())
    }

    async fn free_count(&self) -> Result<u64, TableError> {
        let now = Instant::now();
        let inner = self.lock();
        Ok(inner.rows.iter().filter(|row| row.is_free(now)).count() as u64)
    }

    /// Frees `id` at once, keeping its floor: the next holder still starts above what the dead
    /// node may have issued. The old holder's renewal answers `Lost`.
    async fn force_release(&self, id: MachineId) -> Result<bool, TableError> {
        let now = Instant::now();
        let mut inner = self.lock();
        let row = &mut inner.rows[usize::from(id.get())];
        if row.is_free(now) {
            return Ok(false);
        }
        row.expires_at = None;
        Ok(true)
    }

    async fn migrate(&self) -> Result<Migration, TableError> {
        Ok(Migration::NoSchema {
            reason: "the table lives in process memory and needs no schema".to_owned(),
        })
    }
}

/// `docs/implementing-a-strategy.md`, whose examples run as this crate's doctests.
#[cfg(doctest)]
#[doc = include_str!("../../../docs/implementing-a-strategy.md")]
pub struct ImplementingAStrategy;
