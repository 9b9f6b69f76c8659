//! [`SqlLeaseError`]: what went wrong, what to do about it, and its [`ErrorKind`].

use lease_core::backend::duration;
use lease_core::{ErrorKind, LeaseError, MachineId};

use crate::Dialect;

/// A failed lease operation or migration, saying what the operator should do.
///
/// [`LeaseError::kind`] maps it onto `lease-core`'s [`ErrorKind`], which decides whether the lease
/// manager retries, reacquires or fails startup.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SqlLeaseError {
    /// The lease table (or the coordinator table) does not exist.
    #[error(
        "table `{table}` does not exist: run the migration (`SqlStrategy::migrate`, or migrations/{dialect}.sql with the table name)"
    )]
    MissingTable {
        /// The configured table name.
        table: String,
        /// The database.
        dialect: Dialect,
        /// The database's error.
        #[source]
        source: sqlx::Error,
    },
    /// The table exists but its columns are not `id`, `token`, `expires_at`, `lock_version`,
    /// `floor_ms` of the expected types.
    #[error(
        "lease table `{table}` does not have the expected schema (id smallint, token 16 bytes, expires_at timestamp, lock_version integer, floor_ms bigint): run the migration, which adds floor_ms to a table made by NoNoncense or an older nononce; otherwise point the strategy at the right table"
    )]
    WrongSchema {
        /// The configured table name.
        table: String,
        /// The database's error.
        #[source]
        source: sqlx::Error,
    },
    /// The database user may not read or write the lease table or the coordinator table (or
    /// create them, for the migration).
    #[error(
        "the database user may not use table `{table}`: grant it select, update and insert (which puts back rows deleted by hand) on the lease table, select, insert and update on nononce_coordinator (PostgreSQL, MySQL), and create, for the migration; or make the database file writable"
    )]
    PermissionDenied {
        /// The configured table name.
        table: String,
        /// The database's error.
        #[source]
        source: sqlx::Error,
    },
    /// The database refused the connection settings (credentials, database name, TLS, URL).
    #[error(
        "the database refused the connection settings: check the url, user, password, database name and tls options"
    )]
    Connection(#[source] sqlx::Error),
    /// The database did not answer, dropped the connection or is shutting down; the outcome of
    /// the operation is unknown.
    #[error(
        "the database did not answer or dropped the connection: check that it is running and reachable; the operation is retried"
    )]
    Unavailable(#[source] sqlx::Error),
    /// The database aborted the operation because of a concurrent one (deadlock, serialization
    /// failure, lock timeout).
    #[error("the database aborted the operation because of a concurrent one: it is retried")]
    Contention(#[source] sqlx::Error),
    /// The connection pool was closed while the strategy still uses it.
    #[error("the connection pool was closed: keep it open while the lease manager runs")]
    PoolClosed,
    /// Every row of the table is leased.
    #[error(
        "every machine id in lease table `{table}` is leased: stop unused nodes, wait for their leases to expire, or run the migration if the table has fewer than {count} rows",
        count = lease_core::MachineId::COUNT
    )]
    Exhausted {
        /// The configured table name.
        table: String,
    },
    /// Acquisition is held off: the database server is not the one recorded as having granted
    /// the table's leases (see "Coordinator amnesia" in the crate docs).
    #[error(
        "acquisition is held off for {} more: the database server is not the one that granted the leases in `{table}` ({}), so it may lack leases that running nodes still hold (failover to a lagging replica, restore into a new cluster); renewals go on meanwhile. If every acknowledged write survives a failover (synchronous replication), turn the guard off: `amnesia_guard=off` in the url or `SqlStrategy::with_amnesia_guard(AmnesiaGuard::Off)`. The hold-off is the longest lease and twice the largest clock offset of a node (`max_lease_s` and `max_clock_offset_s` in the url)",
        duration(*.remaining),
        changed(.previous.as_deref(), .current)
    )]
    ServerChanged {
        /// The configured table name.
        table: String,
        /// The server recorded before (`None`: no record, though leases had been granted).
        previous: Option<String>,
        /// The server now.
        current: String,
        /// How much longer acquisition holds off.
        remaining: std::time::Duration,
    },
    /// Acquisition is held off: rows of the lease table had vanished although the table had
    /// been seeded (`TRUNCATE` or `DELETE` while the database stayed up), so nodes may still use
    /// their IDs. The rows are back, blocked until the hold-off ends (see "Deleted rows" in the
    /// crate docs).
    #[error(
        "acquisition is held off for {} more: {blocked} machine ids had vanished from lease table `{table}` although it had been seeded (TRUNCATE or DELETE FROM the table while the database stayed up), so running nodes may still use them; they are back, blocked until then, and the nodes that held them find their renewals lost. Wait: acquisition resumes by itself. `nononce leases release --store URL --id N --yes` frees one at once, on a floor at the end of its block (64-bit counter and sortable nonces wait for the clock to pass it). Never TRUNCATE or DELETE the lease table while nodes run: free a dead node's id with `nononce leases release`. The hold-off is the longest lease (`max_lease_s` in the url) and, except on SQLite, twice the largest clock offset of a node (`max_clock_offset_s`); `amnesia_guard=off` turns this check off",
        duration(*.remaining)
    )]
    RowsDeleted {
        /// The configured table name.
        table: String,
        /// How many IDs are blocked because their rows had vanished.
        blocked: u64,
        /// How much longer acquisition holds off.
        remaining: std::time::Duration,
    },
    /// The PostgreSQL server is a standby (in recovery) and cannot grant leases.
    #[error(
        "the database server is a standby (in recovery): it cannot grant leases; point the strategy at the primary; the operation is retried"
    )]
    Standby,
    /// Other nodes claimed every candidate ID first.
    #[error(
        "other nodes claimed all {candidates} candidate machine ids first: acquisition is retried"
    )]
    Conflict {
        /// How many candidates were tried.
        candidates: usize,
    },
    /// The lease's row no longer carries its token: it expired and another node claimed it (or
    /// the row was changed by hand).
    #[error(
        "the lease on machine id {machine_id} is no longer ours: another node holds it now, stop using the id"
    )]
    Lost {
        /// The ID whose lease was lost.
        machine_id: MachineId,
    },
    /// A table name that is not a plain SQL identifier.
    #[error(
        "invalid lease table name `{0}`: use lowercase ascii letters, digits and underscores (not starting with a digit, at most 63 characters), optionally prefixed by a schema name and a dot"
    )]
    InvalidTableName(String),
    /// A requested lease duration the strategy refuses.
    #[error("lease duration of {0:?} is too long: ask for at most 366 days")]
    DurationTooLong(std::time::Duration),
    /// The longest lease is below the lease manager's minimum TTL: every grant would be refused
    /// as an illegal TTL (see [`Strategy::check_terms`](lease_core::Strategy::check_terms)).
    #[error(
        "max_lease_duration ({}, `max_lease_s` in the database url) is below the lease manager's min_ttl ({}): every grant is at most max_lease_duration, and the manager would refuse each one as an illegal ttl and block a machine id with it; raise `max_lease_s=` or `SqlStrategy::with_max_lease_duration` to at least min_ttl, or lower `LeaseConfig::with_min_ttl` (with the margin and renew interval)",
        seconds(*.max_lease),
        seconds(*.min_ttl)
    )]
    MaxLeaseBelowMinTtl {
        /// The longest lease the strategy grants, as the database applies it.
        max_lease: std::time::Duration,
        /// The lease manager's minimum TTL.
        min_ttl: std::time::Duration,
    },
    /// A query option in a database URL that neither lease-sql nor the database driver knows.
    #[error(
        "unknown option `{option}` in the database url: lease-sql takes table, max_lease_s, amnesia_guard and max_clock_offset_s; the driver takes {driver}"
    )]
    UnknownUrlOption {
        /// The option's name.
        option: String,
        /// The driver's own options for this database.
        driver: &'static str,
    },
    /// A setting out of range or a URL option with a bad value.
    #[error("invalid lease-sql setting: {0}")]
    InvalidOption(String),
    /// A URL whose database is unknown or not compiled in; it holds the URL with its password
    /// hidden ([`redacted_url`](crate::redacted_url)).
    #[error(
        "unsupported database url `{0}`: use postgres://, mysql://, mariadb:// or sqlite: with the matching lease-sql feature enabled"
    )]
    UnsupportedUrl(String),
    /// The operating system's random source failed while making a lease token.
    #[error("the operating system's random source failed while making a lease token")]
    Random(#[source] getrandom::Error),
    /// Any other database error.
    #[error("unexpected database error")]
    Database(#[source] sqlx::Error),
}

impl LeaseError for SqlLeaseError {
    fn kind(&self) -> ErrorKind {
        match self {
            Self::Lost { .. } => ErrorKind::Lost,
            Self::Unavailable(_)
            | Self::ServerChanged { .. }
            | Self::RowsDeleted { .. }
            | Self::Standby => ErrorKind::Retry,
            Self::Contention(_) | Self::Conflict { .. } => ErrorKind::Conflict,
            Self::Exhausted { .. } => ErrorKind::Exhausted,
            Self::MissingTable { .. }
            | Self::WrongSchema { .. }
            | Self::PermissionDenied { .. }
            | Self::Connection(_)
            | Self::PoolClosed
            | Self::InvalidTableName(_)
            | Self::DurationTooLong(_)
            | Self::UnsupportedUrl(_)
            | Self::UnknownUrlOption { .. }
            | Self::InvalidOption(_)
            | Self::MaxLeaseBelowMinTtl { .. } => ErrorKind::Misconfigured,
            Self::Random(_) | Self::Database(_) => ErrorKind::Other,
        }
    }
}

/// Whole seconds, or seconds and milliseconds: `10 s`, `30.001 s`.
fn seconds(d: std::time::Duration) -> String {
    match d.subsec_millis() {
        0 => format!("{} s", d.as_secs()),
        ms => format!("{}.{ms:03} s", d.as_secs()),
    }
}

fn changed(previous: Option<&str>, current: &str) -> String {
    match previous {
        Some(previous) => format!("server {previous} is now {current}"),
        None => format!("there is no record of the server that granted them; this is {current}"),
    }
}

/// What a database error means for the lease, independent of the dialect.
enum Class {
    MissingTable,
    WrongSchema,
    Permission,
    Connection,
    Unavailable,
    Contention,
    Other,
}

impl SqlLeaseError {
    /// Classifies a sqlx error from an operation on `table`.
    pub(crate) fn from_sqlx(source: sqlx::Error, table: &str, dialect: Dialect) -> Self {
        let class = match &source {
            sqlx::Error::Database(db) => classify_database(db.as_ref(), dialect),
            sqlx::Error::Io(_)
            | sqlx::Error::Protocol(_)
            | sqlx::Error::PoolTimedOut
            | sqlx::Error::WorkerCrashed => Class::Unavailable,
            sqlx::Error::PoolClosed => return Self::PoolClosed,
            sqlx::Error::Tls(_) | sqlx::Error::Configuration(_) => Class::Connection,
            sqlx::Error::TypeNotFound { .. }
            | sqlx::Error::ColumnNotFound(_)
            | sqlx::Error::ColumnIndexOutOfBounds { .. }
            | sqlx::Error::ColumnDecode { .. }
            | sqlx::Error::Decode(_) => Class::WrongSchema,
            _ => Class::Other,
        };
        let table = table.to_owned();
        match class {
            Class::MissingTable => Self::MissingTable {
                table,
                dialect,
                source,
            },
            Class::WrongSchema => Self::WrongSchema { table, source },
            Class::Permission => Self::PermissionDenied { table, source },
            Class::Connection => Self::Connection(source),
            Class::Unavailable => Self::Unavailable(source),
            Class::Contention => Self::Contention(source),
            Class::Other => Self::Database(source),
        }
    }
}

#[allow(unused_variables)]
fn classify_database(db: &dyn sqlx::error::DatabaseError, dialect: Dialect) -> Class {
    match dialect {
        #[cfg(feature = "postgres")]
        Dialect::Postgres => classify_postgres(db.code().as_deref().unwrap_or("")),
        #[cfg(feature = "mysql")]
        Dialect::MySql => db
            .try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>()
            .map_or(Class::Other, |e| classify_mysql(e.number())),
        #[cfg(feature = "sqlite")]
        Dialect::Sqlite => classify_sqlite(db.code().as_deref().unwrap_or(""), db.message()),
        #[allow(unreachable_patterns)]
        _ => Class::Other,
    }
}

/// PostgreSQL SQLSTATE codes.
#[cfg(feature = "postgres")]
fn classify_postgres(code: &str) -> Class {
    match code {
        // undefined_table, invalid_schema_name
        "42P01" | "3F000" => Class::MissingTable,
        // undefined_column, datatype_mismatch, undefined_function (operator on wrong type),
        // invalid_text_representation, cannot_coerce, numeric_value_out_of_range
        "42703" | "42804" | "42883" | "22P02" | "42846" | "22003" => Class::WrongSchema,
        // insufficient_privilege
        "42501" => Class::Permission,
        // invalid_authorization_specification, invalid_password, invalid_catalog_name
        "28000" | "28P01" | "3D000" => Class::Connection,
        // serialization_failure, deadlock_detected, lock_not_available
        "40001" | "40P01" | "55P03" => Class::Contention,
        // admin_shutdown, crash_shutdown, cannot_connect_now, too_many_connections,
        // read_only_sql_transaction (a standby after failover), query_canceled
        "57P01" | "57P02" | "57P03" | "53300" | "25006" | "57014" => Class::Unavailable,
        // connection_exception class
        c if c.starts_with("08") => Class::Unavailable,
        _ => Class::Other,
    }
}

/// MySQL / MariaDB error numbers.
#[cfg(feature = "mysql")]
fn classify_mysql(number: u16) -> Class {
    match number {
        // ER_NO_SUCH_TABLE
        1146 => Class::MissingTable,
        // ER_BAD_FIELD_ERROR, ER_TRUNCATED_WRONG_VALUE(_FOR_FIELD), ER_DATA_TOO_LONG,
        // ER_WARN_DATA_OUT_OF_RANGE, WARN_DATA_TRUNCATED
        1054 | 1292 | 1366 | 1406 | 1264 | 1265 => Class::WrongSchema,
        // ER_DBACCESS_DENIED, ER_TABLEACCESS_DENIED, ER_COLUMNACCESS_DENIED,
        // ER_SPECIFIC_ACCESS_DENIED, ER_PROCACCESS_DENIED
        1044 | 1142 | 1143 | 1227 | 1370 => Class::Permission,
        // ER_ACCESS_DENIED, ER_BAD_DB
        1045 | 1049 => Class::Connection,
        // ER_LOCK_DEADLOCK, ER_LOCK_WAIT_TIMEOUT
        1213 | 1205 => Class::Contention,
        // ER_CON_COUNT_ERROR, ER_SERVER_SHUTDOWN, ER_QUERY_INTERRUPTED, ER_OPTION_PREVENTS_STATEMENT
        // (read only), ER_CONNECTION_KILLED, CR_SERVER_GONE_ERROR, CR_SERVER_LOST
        1040 | 1053 | 1317 | 1290 | 1927 | 2006 | 2013 => Class::Unavailable,
        _ => Class::Other,
    }
}

/// SQLite extended result codes and messages.
#[cfg(feature = "sqlite")]
fn classify_sqlite(code: &str, message: &str) -> Class {
    let primary = code.parse::<i32>().map_or(-1, |c| c & 0xff);
    match primary {
        // SQLITE_BUSY, SQLITE_LOCKED: the busy timeout ran out
        5 | 6 => Class::Contention,
        // SQLITE_READONLY, SQLITE_PERM, SQLITE_AUTH
        8 | 3 | 23 => Class::Permission,
        // SQLITE_CANTOPEN, SQLITE_NOTADB, SQLITE_CORRUPT
        14 | 26 | 11 => Class::Connection,
        // SQLITE_IOERR, SQLITE_FULL
        10 | 13 => Class::Unavailable,
        // SQLITE_MISMATCH, SQLITE_CONSTRAINT
        20 | 19 => Class::WrongSchema,
        _ if message.starts_with("no such table") => Class::MissingTable,
        _ if message.starts_with("no such column") || message.contains("has no column") => {
            Class::WrongSchema
        }
        _ => Class::Other,
    }
}
