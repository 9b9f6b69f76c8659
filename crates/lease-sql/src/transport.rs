//! Where the strategy meets the database: one [`Request`] per step of the protocol, answered
//! with a [`Reply`] or the database's error, over a [`Transport`].
//!
//! [`SqlStrategy`](crate::SqlStrategy) holds the lease protocol (the amnesia guard's verdicts
//! and what it does about them, what a claim that found nothing means, the floor a lost
//! release raises, the tokens it makes) and runs it over any transport. A request names one
//! statement of the protocol, or one claim attempt (one statement on PostgreSQL and SQLite, up
//! to two round trips on MySQL/MariaDB, one per candidate with
//! [`Acquisition::Optimistic`](crate::Acquisition::Optimistic)). The default transport,
//! [`Connection`], runs the statements of its dialect on a sqlx pool;
//! another transport can answer the same requests from something else (a simulated database),
//! so that the protocol it runs is the one production runs.

use std::future::Future;
use std::time::Duration;

use lease_core::MachineId;

pub use crate::amnesia::{Diagnosis, Rows};
pub use crate::strategy::Connection;
use crate::table::TableName;
use crate::{AmnesiaGuard, Dialect, SqlLeaseError};

/// One step of the protocol, at the level the strategy speaks it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Request {
    /// One claim attempt: a free row, preferring one whose floor is below `now_ms`, claimed
    /// with `token` for `amount`, its floor raised to `floor_ms` (with the amnesia guard on,
    /// only on the server recorded for the table).
    Claim {
        /// The new lease's token.
        token: [u8; 16],
        /// The lease duration, as the database applies it.
        amount: Duration,
        /// The floor to raise the row's to.
        floor_ms: u64,
        /// The acquirer's clock.
        now_ms: u64,
    },
    /// The amnesia guard's diagnosis of the server and the table (PostgreSQL, MySQL/MariaDB).
    Diagnose,
    /// The deleted-rows check alone (SQLite): the free rows and what the rows say.
    DiagnoseRows,
    /// Records `identity` as the table's server if none is recorded: trusted (no hold-off),
    /// or from now on.
    Record {
        /// The server's identity.
        identity: String,
        /// Whether it is trusted at once.
        trusted: bool,
    },
    /// Replaces the recorded server `recorded` by `current`, from now on.
    Replace {
        /// The server now.
        current: String,
        /// The server recorded.
        recorded: String,
    },
    /// Counts the free rows.
    CountFree,
    /// Puts the missing rows of the seeded table back (blocked for the amnesia hold-off with
    /// the guard on).
    Restore,
    /// Extends the lease `(id, token)` to `amount` and raises its floor to `floor_ms`.
    Renew {
        /// The row.
        id: MachineId,
        /// The lease's token.
        token: [u8; 16],
        /// The lease duration, as the database applies it.
        amount: Duration,
        /// The floor to raise the row's to.
        floor_ms: u64,
    },
    /// Releases the lease `(id, token)`: blocked for `guard`, token cleared, floor set.
    Release {
        /// The row.
        id: MachineId,
        /// The lease's token.
        token: [u8; 16],
        /// How long the row stays blocked, as the database applies it.
        guard: Duration,
        /// The floor to set.
        floor_ms: u64,
    },
    /// Raises `id`'s floor to at least `floor_ms`, whoever holds it.
    RaiseFloor {
        /// The row.
        id: MachineId,
        /// The floor to raise the row's to.
        floor_ms: u64,
    },
}

impl Request {
    /// What the request runs, as error messages name it (never its token).
    #[must_use]
    pub const fn name(&self) -> &'static str {
        match self {
            Self::Claim { .. } => "the claim",
            Self::Diagnose => "the amnesia guard's diagnosis",
            Self::DiagnoseRows => "the deleted-rows check",
            Self::Record { .. } => "the server record",
            Self::Replace { .. } => "the server replacement",
            Self::CountFree => "the free-row count",
            Self::Restore => "the restore of deleted rows",
            Self::Renew { .. } => "the renewal",
            Self::Release { .. } => "the release",
            Self::RaiseFloor { .. } => "the floor raise",
        }
    }
}

/// What a claim attempt did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Claim {
    /// Claimed `id`.
    Won {
        /// The row claimed.
        id: MachineId,
        /// Its floor before the claim.
        floor_ms: u64,
        /// The database clock (Unix ms) when it applied the claim.
        coordinator_ms: u64,
    },
    /// No free row could be claimed after trying `tried` candidates.
    Nothing {
        /// Candidates tried (0 where the claim is one statement).
        tried: usize,
    },
}

/// The database's answer to a [`Request`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Reply {
    /// A claim attempt's outcome.
    Claim(Claim),
    /// The amnesia guard's diagnosis.
    Diagnosis(Diagnosis),
    /// The deleted-rows check: free rows, and what the rows say.
    Rows {
        /// Free rows.
        free: i64,
        /// What the rows say.
        rows: Rows,
    },
    /// Free rows.
    Free(i64),
    /// A renewal or release: whether it matched the row (else the lease is not ours any more),
    /// and the database clock (Unix ms) where the statement reports it.
    Matched {
        /// Whether the row carried the token.
        ours: bool,
        /// The database clock, if reported.
        clock_ms: Option<u64>,
    },
    /// A statement without an answer ran.
    Done,
}

/// The settings the statements depend on, given to the transport whenever one changes.
#[derive(Debug, Clone)]
pub struct Settings {
    pub(crate) table: TableName,
    pub(crate) amnesia_guard: AmnesiaGuard,
    pub(crate) hold_off: Duration,
}

impl Settings {
    /// The lease table.
    #[must_use]
    pub fn table(&self) -> &str {
        self.table.as_str()
    }

    /// The amnesia guard.
    #[must_use]
    pub const fn amnesia_guard(&self) -> AmnesiaGuard {
        self.amnesia_guard
    }

    /// The amnesia hold-off (and how long restored rows stay blocked).
    #[must_use]
    pub const fn hold_off(&self) -> Duration {
        self.hold_off
    }
}

/// How a [`SqlStrategy`](crate::SqlStrategy) reaches the database.
pub trait Transport: Send + Sync + 'static {
    /// Runs `request` and waits for its answer.
    fn exchange(&self, request: Request)
    -> impl Future<Output = Result<Reply, sqlx::Error>> + Send;

    /// The database's dialect: how durations are applied, and which guards exist.
    fn dialect(&self) -> Dialect;

    /// The settings the statements depend on changed.
    fn configure(&mut self, settings: &Settings);

    /// A new random lease token.
    ///
    /// # Errors
    /// When no randomness is available.
    fn token(&self) -> Result<[u8; 16], SqlLeaseError>;
}
