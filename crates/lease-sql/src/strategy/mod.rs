//! [`SqlStrategy`]: the lease protocol over one table, for each dialect. This file holds the
//! strategy's settings; each part of the protocol has a file of its own.

mod admin;
mod amount;
mod backend;
mod claim;
mod connect;
mod connection;
mod explain;
mod lease;
mod lease_strategy;
mod migrate;
mod nothing_claimed;
mod own_lease;

use core::fmt;
use lease_core::time::amnesia_hold_off;
use std::time::Duration;

use crate::table::{DEFAULT_TABLE, TableName};
use crate::transport::{Settings, Transport};
use crate::{AmnesiaGuard, Dialect, SqlLeaseError};
use amount::{Amount, MAX_DURATION};

pub use connection::{Acquisition, Connection};
pub use lease::SqlLease;

/// The default longest lease of the fleet: NoNoncense's lease duration.
const DEFAULT_MAX_LEASE: Duration = Duration::from_secs(8 * 3600);

/// The default largest clock offset between a node and the database: an hour, the clock
/// difference between nodes that a handover tolerates anyway.
const DEFAULT_MAX_CLOCK_OFFSET: Duration = Duration::from_secs(3600);

/// Machine-ID leases in one SQL table, on PostgreSQL, MySQL/MariaDB or SQLite.
///
/// Cheap to clone: clones share the connection pool. See the crate docs for the protocol, the
/// schema, the migration and the amnesia guard.
///
/// | setting | default | meaning |
/// |---|---|---|
/// | [`with_table`](Self::with_table) | `no_noncense_leases` | the lease table (shared with NoNoncense nodes) |
/// | [`with_acquisition`](Self::with_acquisition) | [`Acquisition::SkipLocked`] | how a free row is claimed |
/// | [`with_max_lease_duration`](Self::with_max_lease_duration) | 8 h | longest lease granted; longer requests are shortened to it |
/// | [`with_amnesia_guard`](Self::with_amnesia_guard) | [`AmnesiaGuard::HoldOff`] | defence against a server that lost lease writes |
/// | [`with_max_clock_offset`](Self::with_max_clock_offset) | 1 h | with the guard on: largest offset of a node's clock from the database's that nodes accept |
///
/// The amnesia hold-off is `max_lease_duration + 2 × max_clock_offset`
/// ([`amnesia_hold_off`](Self::amnesia_hold_off)).
///
/// `T` is how statements reach the database ([`Transport`]): by default a [`Connection`], a
/// sqlx pool with its dialect's statements.
#[derive(Clone)]
pub struct SqlStrategy<T = Connection> {
    /// The database, with the statements for the settings below.
    transport: T,
    table: TableName,
    amnesia_guard: AmnesiaGuard,
    max_lease_duration: Duration,
    max_clock_offset: Duration,
}

impl<T: Transport + fmt::Debug> fmt::Debug for SqlStrategy<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SqlStrategy")
            .field("transport", &self.transport)
            .field("table", &self.table.as_str())
            .field("amnesia_guard", &self.amnesia_guard)
            .field("max_lease_duration", &self.max_lease_duration)
            .field("max_clock_offset", &self.max_clock_offset)
            .finish_non_exhaustive()
    }
}

impl<T: Transport> SqlStrategy<T> {
    /// A strategy with the default settings over `transport` (see [`crate::transport`]).
    pub fn with_transport(transport: T) -> Self {
        let mut strategy = Self {
            transport,
            table: TableName::new(DEFAULT_TABLE).unwrap_or_else(|_| unreachable!()),
            amnesia_guard: AmnesiaGuard::default(),
            max_lease_duration: DEFAULT_MAX_LEASE,
            max_clock_offset: DEFAULT_MAX_CLOCK_OFFSET,
        };
        strategy.rebuild();
        strategy
    }

    /// The transport.
    pub const fn transport(&self) -> &T {
        &self.transport
    }

    /// Gives the transport the settings again after one that statements depend on changed.
    fn rebuild(&mut self) {
        let settings = Settings {
            table: self.table.clone(),
            amnesia_guard: self.amnesia_guard,
            hold_off: self.amnesia_hold_off(),
        };
        self.transport.configure(&settings);
    }

    /// Uses table `name` instead of `no_noncense_leases`: a lowercase identifier, optionally
    /// `schema.table`.
    ///
    /// # Errors
    /// [`SqlLeaseError::InvalidTableName`] for anything else, [`SqlLeaseError::InvalidOption`] for
    /// `nononce_coordinator`, the coordinator table's name.
    pub fn with_table(mut self, name: &str) -> Result<Self, SqlLeaseError> {
        let table = TableName::new(name)?;
        if table.is_coordinator() {
            return Err(SqlLeaseError::InvalidOption(format!(
                "`{name}` is lease-sql's coordinator table: pick another lease table name"
            )));
        }
        self.table = table;
        self.rebuild();
        Ok(self)
    }

    /// Sets the longest lease any node of the deployment may hold (default 8 h, the lease
    /// duration of NoNoncense and of the lease manager). Requests for longer are granted this
    /// long; the amnesia guard holds acquisition off for this long (plus twice
    /// [`max_clock_offset`](Self::with_max_clock_offset)) after it notices a changed server. It
    /// must not be below the lease manager's `min_ttl` (30 s by default): the manager's start
    /// fails with [`SqlLeaseError::MaxLeaseBelowMinTtl`] if it is
    /// ([`Strategy::check_terms`](lease_core::Strategy::check_terms)).
    ///
    /// # Errors
    /// [`SqlLeaseError::InvalidOption`] below 1 ms or above 366 days.
    pub fn with_max_lease_duration(mut self, max: Duration) -> Result<Self, SqlLeaseError> {
        if max < Duration::from_millis(1) || max > MAX_DURATION {
            return Err(SqlLeaseError::InvalidOption(format!(
                "max_lease_duration of {max:?} is out of range: use 1 ms to 366 days"
            )));
        }
        self.max_lease_duration = max;
        self.rebuild();
        Ok(self)
    }

    /// Sets the amnesia guard (default [`AmnesiaGuard::HoldOff`]; SQLite ignores it).
    #[must_use]
    pub fn with_amnesia_guard(mut self, guard: AmnesiaGuard) -> Self {
        self.amnesia_guard = guard;
        self.rebuild();
        self
    }

    /// Sets the largest offset between a node's clock and the database's (default 1 h) that
    /// the amnesia guard allows for. A holder the new server forgot may have issued timestamps
    /// up to its own clock at its lease's end, and a successor starts at its own clock: so the
    /// hold-off outlasts the longest lease by twice this offset, and with the guard on, every
    /// grant and renewal asks the lease manager to refuse the lease when the node's clock is
    /// further off the database's than this (an error that names this setting). Ignored with
    /// [`AmnesiaGuard::Off`] and on SQLite. Every node of the deployment needs the same value.
    ///
    /// # Errors
    /// [`SqlLeaseError::InvalidOption`] when the hold-off would pass 366 days.
    pub fn with_max_clock_offset(mut self, max: Duration) -> Result<Self, SqlLeaseError> {
        if amnesia_hold_off(self.max_lease_duration, max) > MAX_DURATION {
            return Err(SqlLeaseError::InvalidOption(format!(
                "max_clock_offset of {max:?} is out of range: the amnesia hold-off, \
                 max_lease_duration plus twice it, must stay within 366 days"
            )));
        }
        self.max_clock_offset = max;
        self.rebuild();
        Ok(self)
    }

    /// The database this strategy talks to.
    #[must_use]
    pub fn dialect(&self) -> Dialect {
        self.transport.dialect()
    }

    /// The lease table's name.
    #[must_use]
    pub fn table(&self) -> &str {
        self.table.as_str()
    }

    /// The longest lease granted.
    #[must_use]
    pub const fn max_lease_duration(&self) -> Duration {
        self.max_lease_duration
    }

    /// The largest clock offset the amnesia guard allows for.
    #[must_use]
    pub const fn max_clock_offset(&self) -> Duration {
        self.max_clock_offset
    }

    /// How long the amnesia guard holds acquisition off after it noticed a changed server, and
    /// how long rows put back after they were deleted stay blocked:
    /// `max_lease_duration + 2 × max_clock_offset`; on SQLite, whose nodes share one host's
    /// clock, `max_lease_duration`.
    #[must_use]
    pub fn amnesia_hold_off(&self) -> Duration {
        match self.dialect() {
            Dialect::Sqlite => self.max_lease_duration,
            Dialect::Postgres | Dialect::MySql => {
                amnesia_hold_off(self.max_lease_duration, self.max_clock_offset)
            }
        }
    }

    /// The amnesia guard.
    #[must_use]
    pub const fn amnesia_guard(&self) -> AmnesiaGuard {
        self.amnesia_guard
    }

    /// A requested lease duration, shortened to the longest lease.
    fn lease_amount(&self, requested: Duration) -> Result<Amount, SqlLeaseError> {
        if requested > MAX_DURATION {
            return Err(SqlLeaseError::DurationTooLong(requested));
        }
        Amount::new(requested.min(self.max_lease_duration), self.dialect())
    }

    /// Whether acquisitions check the server's identity (guard on, and not SQLite).
    fn guarded(&self) -> bool {
        self.amnesia_guard == AmnesiaGuard::HoldOff && self.dialect() != Dialect::Sqlite
    }
}

impl SqlStrategy<Connection> {
    /// Chooses how free rows are claimed on PostgreSQL and MySQL (default:
    /// [`Acquisition::SkipLocked`]).
    #[must_use]
    pub fn with_acquisition(mut self, acquisition: Acquisition) -> Self {
        self.transport.acquisition = match acquisition {
            Acquisition::Optimistic { candidates } => Acquisition::Optimistic {
                candidates: candidates.max(1),
            },
            other @ Acquisition::SkipLocked => other,
        };
        self
    }

    /// How free rows are claimed.
    #[must_use]
    pub const fn acquisition(&self) -> Acquisition {
        self.transport.acquisition
    }
}
