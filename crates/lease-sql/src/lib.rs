#![doc = include_str!("../README.md")]
#![forbid(unsafe_code)]
#![warn(missing_docs)]
// Without a dialect feature the crate has no backend: its code paths are all unreachable.
#![cfg_attr(
    not(any(feature = "postgres", feature = "mysql", feature = "sqlite")),
    allow(unused, unreachable_code)
)]

mod amnesia;
mod backend;
mod error;
mod migration;
mod operator;
mod queries;
mod strategy;
mod table;
pub mod transport;
mod url;

use core::fmt;

pub use amnesia::AmnesiaGuard;
pub use backend::SqlBackend;
pub use error::SqlLeaseError;
pub use migration::migration_sql;
pub use strategy::{Acquisition, SqlLease, SqlStrategy};
pub use table::{COORDINATOR_TABLE, DEFAULT_TABLE};
pub use url::redacted_url;

/// The sqlx version this crate is built on, for building pools and connect options.
pub use sqlx;

/// The SQL database a [`SqlStrategy`] talks to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Dialect {
    /// PostgreSQL.
    Postgres,
    /// MySQL or MariaDB.
    MySql,
    /// SQLite.
    Sqlite,
}

impl Dialect {
    /// The strategy name for logs and metrics: `"postgres"`, `"mysql"` or `"sqlite"`, which is
    /// also the migration's file name in `migrations/`.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Postgres => "postgres",
            Self::MySql => "mysql",
            Self::Sqlite => "sqlite",
        }
    }
}

impl fmt::Display for Dialect {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Connect options for a SQLite lease store shared by the processes of one host: the database
/// file at `path` (created if missing), WAL journal (readers never block the writer),
/// `synchronous = NORMAL`, and a 5 s busy timeout so processes writing at once wait for each
/// other instead of failing.
#[cfg(feature = "sqlite")]
#[must_use]
pub fn sqlite_options(path: impl AsRef<std::path::Path>) -> sqlx::sqlite::SqliteConnectOptions {
    configure_sqlite(sqlx::sqlite::SqliteConnectOptions::new().filename(path))
}

#[cfg(feature = "sqlite")]
pub(crate) fn configure_sqlite(
    options: sqlx::sqlite::SqliteConnectOptions,
) -> sqlx::sqlite::SqliteConnectOptions {
    options
        .create_if_missing(true)
        .journal_mode(sqlx::sqlite::SqliteJournalMode::Wal)
        .synchronous(sqlx::sqlite::SqliteSynchronous::Normal)
        .busy_timeout(std::time::Duration::from_secs(5))
}
