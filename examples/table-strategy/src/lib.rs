//! A third-party lease strategy, written against `lease-core` alone.
//!
//! `Table` coordinates lease managers that share one process (a test rig, or one process
//! hosting several tenants): a table of 512 rows, each with an owner token and an expiry. It
//! follows the `Strategy` contract the way a database-backed strategy would: the coordinator's
//! clock decides expiry, renewals match the owner's token, and release keeps the ID blocked for
//! the guard interval. `tests/conformance.rs` runs the `lease-testkit` suite against it.

#![forbid(unsafe_code)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use lease_core::{ErrorKind, Grant, LeaseError, MachineId, Renewal, Strategy};
use tokio::time::Instant;

const IDS: usize = MachineId::COUNT as usize;

#[derive(Clone, Copy)]
struct Row {
    token: u64,
    expires_at: Option<Instant>,
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
    /// An empty table: every ID free.
    pub fn new() -> Self {
        let row = Row {
            token: 0,
            expires_at: None,
        };
        Self {
            inner: Arc::new(Mutex::new(Inner {
                rows: [row; IDS],
                next_token: 1,
            })),
        }
    }

    /// Ends the lease on `id` at once, as an operator freeing a dead node's ID would.
    pub fn expire(&self, id: MachineId) {
        let mut inner = self.inner.lock().expect("table lock");
        inner.rows[usize::from(id.get())].expires_at = Some(Instant::now());
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

fn free(row: &Row, now: Instant) -> bool {
    row.expires_at.is_none_or(|at| at <= now)
}

impl Strategy for Table {
    type Lease = TableLease;
    type Error = TableError;

    async fn acquire(&self, requested: Duration) -> Result<Grant<TableLease>, TableError> {
        let now = Instant::now();
        let mut inner = self.inner.lock().expect("table lock");
        // Start the search at a spot that varies per call, so nodes starting together spread out.
        let start =
            usize::try_from(inner.next_token.wrapping_mul(0x9E37_79B9) % IDS as u64).unwrap_or(0);
        let index = (0..IDS)
            .map(|i| (start + i) % IDS)
            .find(|&i| free(&inner.rows[i], now))
            .ok_or(TableError::Exhausted)?;
        let token = inner.next_token;
        inner.next_token += 1;
        inner.rows[index] = Row {
            token,
            expires_at: Some(now + requested),
        };
        let id = MachineId::new(u16::try_from(index).expect("index < IDS"))
            .expect("index < IDS, the number of machine ids");
        Ok(Grant::new(id, TableLease { id, token }, requested))
    }

    async fn renew(
        &self,
        lease: &TableLease,
        requested: Duration,
    ) -> Result<Renewal<TableLease>, TableError> {
        let now = Instant::now();
        let mut inner = self.inner.lock().expect("table lock");
        let row = &mut inner.rows[usize::from(lease.id.get())];
        if row.token != lease.token || free(row, now) {
            return Err(TableError::Lost(lease.id));
        }
        row.expires_at = Some(now + requested);
        Ok(Renewal::new(*lease, requested))
    }

    async fn release(&self, lease: &TableLease, guard: Duration) -> Result<(), TableError> {
        let now = Instant::now();
        let mut inner = self.inner.lock().expect("table lock");
        let row = &mut inner.rows[usize::from(lease.id.get())];
        // Only our own live lease, and never sooner than the guard: a successor must not start
        // in our last milliseconds.
        if row.token == lease.token && !free(row, now) {
            let until = now + guard;
            row.expires_at = Some(row.expires_at.map_or(until, |at| at.min(until)));
        }
        Ok(())
    }

    fn name(&self) -> &'static str {
        "table"
    }
}
