//! [`SqlStrategy`]: the lease protocol over one table, for each dialect.

use core::fmt;
use std::sync::Arc;
use std::time::Duration;

use lease_core::time::millis;
use lease_core::{Grant, Holder, MachineId, Renewal, Strategy};
#[allow(unused_imports)]
use sqlx::{AssertSqlSafe, Row};

use crate::amnesia::{Diagnosis, Verdict};
use crate::queries::Queries;
use crate::table::{COORDINATOR_TABLE, DEFAULT_TABLE, TableName};
use crate::{AmnesiaGuard, Dialect, SqlError};

/// The longest lease duration the strategy accepts.
const MAX_DURATION: Duration = Duration::from_secs(366 * 24 * 3600);

/// The default longest lease of the fleet: NoNoncense's lease duration.
const DEFAULT_MAX_LEASE: Duration = Duration::from_secs(8 * 3600);

/// The default largest clock offset between a node and the database: an hour, the clock
/// difference between nodes that a handover tolerates anyway.
const DEFAULT_MAX_CLOCK_OFFSET: Duration = Duration::from_secs(3600);

/// The amnesia hold-off: a forgotten holder stops issuing by the end of its lease, and its
/// timestamps and a successor's may each be `max_clock_offset` off the database's clock.
fn hold_off(max_lease: Duration, max_clock_offset: Duration) -> Duration {
    max_lease.saturating_add(max_clock_offset.saturating_mul(2))
}

/// Runs the same sqlx code on whichever pool the strategy holds: the pools differ only in type.
macro_rules! on_pool {
    ($backend:expr, |$pool:ident| $body:expr) => {
        match $backend {
            #[cfg(feature = "postgres")]
            Backend::Postgres($pool) => $body,
            #[cfg(feature = "mysql")]
            Backend::MySql($pool) => $body,
            #[cfg(feature = "sqlite")]
            Backend::Sqlite($pool) => $body,
            Backend::Never(never) => match *never {},
        }
    };
}

/// How a node picks and claims a free row on PostgreSQL and MySQL/MariaDB.
///
/// SQLite always claims the lowest free row in one atomic statement (its writers are serialized),
/// whatever this says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Acquisition {
    /// Lock the lowest free row with `FOR UPDATE SKIP LOCKED` and claim it in the same
    /// transaction (PostgreSQL: one statement). Nodes starting together each lock a different
    /// row, so nobody loses a race and IDs stay compact. Needs PostgreSQL 9.5+, MySQL 8.0+ or
    /// MariaDB 10.6+, and a connection that keeps a transaction (no statement-level pooling).
    #[default]
    SkipLocked,
    /// The reference protocol without row locks: read up to `candidates` free rows **in random
    /// order**, then claim one with an `UPDATE` guarded by its `lock_version`, trying the next on
    /// a lost race. Works through any pooler and on older servers; randomness spreads nodes that
    /// start together over the free rows instead of all racing for the lowest.
    Optimistic {
        /// How many free rows to read and try per attempt (at least 1).
        candidates: u16,
    },
}

/// A held lease: the machine ID and the random 16-byte token that proves it is ours.
///
/// Renewals and releases match the row on both; a node whose lease expired and was claimed by
/// another node can neither extend nor free the new holder's lease. A release clears the row's
/// token, so once released the handle renews nothing (*lost*).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct SqlLease {
    machine_id: MachineId,
    token: [u8; 16],
}

impl SqlLease {
    /// A lease handle from its parts, for example one saved by a previous process.
    #[must_use]
    pub const fn from_parts(machine_id: MachineId, token: [u8; 16]) -> Self {
        Self { machine_id, token }
    }

    /// The leased machine ID (the row's `id`).
    #[must_use]
    pub const fn machine_id(&self) -> MachineId {
        self.machine_id
    }

    /// The lease token (the row's `token`).
    #[must_use]
    pub const fn token(&self) -> [u8; 16] {
        self.token
    }
}

/// Shows the ID and only a prefix of the token: enough to tell leases apart in logs, not to
/// act as their holder.
impl fmt::Debug for SqlLease {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let prefix: String = self.token[..4].iter().map(|b| format!("{b:02x}")).collect();
        f.debug_struct("SqlLease")
            .field("machine_id", &self.machine_id.get())
            .field("token", &format_args!("{prefix}…"))
            .finish()
    }
}

#[derive(Clone)]
enum Backend {
    #[cfg(feature = "postgres")]
    Postgres(sqlx::PgPool),
    #[cfg(feature = "mysql")]
    MySql(sqlx::MySqlPool),
    #[cfg(feature = "sqlite")]
    Sqlite(sqlx::SqlitePool),
    /// Keeps matches valid when no dialect feature is enabled.
    #[allow(dead_code)]
    Never(core::convert::Infallible),
}

/// A lease duration as the database applies it: whole microseconds (PostgreSQL, MySQL) or
/// milliseconds (SQLite).
#[cfg_attr(
    not(all(feature = "postgres", feature = "mysql", feature = "sqlite")),
    allow(dead_code)
)]
struct Amount {
    micros: i64,
    /// The duration the database will actually add, reported as the granted TTL.
    applied: Duration,
    /// SQLite `strftime` modifier, `+S.mmm seconds`.
    modifier: String,
}

impl Amount {
    fn new(requested: Duration, dialect: Dialect) -> Result<Self, SqlError> {
        if requested > MAX_DURATION {
            return Err(SqlError::DurationTooLong(requested));
        }
        let micros = i64::try_from(requested.as_micros()).unwrap_or(i64::MAX);
        let ms = millis(requested);
        let applied = match dialect {
            Dialect::Sqlite => Duration::from_millis(ms),
            Dialect::Postgres | Dialect::MySql => Duration::from_micros(micros.unsigned_abs()),
        };
        Ok(Self {
            micros,
            applied,
            modifier: format!("+{}.{:03} seconds", ms / 1000, ms % 1000),
        })
    }
}

fn new_token() -> Result<[u8; 16], SqlError> {
    let mut token = [0u8; 16];
    getrandom::fill(&mut token).map_err(SqlError::Random)?;
    Ok(token)
}

fn machine_id(id: i64) -> Result<MachineId, SqlError> {
    u16::try_from(id)
        .ok()
        .and_then(|id| MachineId::new(id).ok())
        .ok_or_else(|| {
            SqlError::Database(sqlx::Error::Protocol(format!(
                "lease table row has id {id}, outside 0..={}",
                MachineId::MAX
            )))
        })
}

/// A floor or clock reading (Unix ms) as the signed column stores it.
fn signed(ms: u64) -> i64 {
    i64::try_from(ms).unwrap_or(i64::MAX)
}

/// A stored floor or clock reading as Unix ms (a negative value, only ever written by hand, is 0).
fn unsigned(ms: i64) -> u64 {
    u64::try_from(ms).unwrap_or(0)
}

/// A small pool for one node's lease traffic.
#[allow(dead_code)]
/// How long [`SqlStrategy::explain`] waits for its one direct connection.
const DIRECT_CONNECT_TIMEOUT: Duration = Duration::from_secs(3);

fn pool_options<DB: sqlx::Database>() -> sqlx::pool::PoolOptions<DB> {
    sqlx::pool::PoolOptions::new()
        .max_connections(4)
        .acquire_timeout(Duration::from_secs(5))
}

/// The outcome of one claim attempt.
enum Claim {
    Won {
        id: i64,
        /// The floor stored before the claim.
        floor: i64,
        /// The database clock (Unix ms) when it applied the claim.
        coordinator_ms: Option<i64>,
    },
    /// No free row could be claimed after trying `tried` candidates.
    None { tried: usize },
}

/// A pooled connection that is closed, not returned to the pool, unless the transaction this
/// code opened on it by hand was ended: also when the future is dropped half-way.
#[allow(dead_code)]
struct CloseUnlessEnded<'a, DB: sqlx::Database> {
    conn: &'a mut sqlx::pool::PoolConnection<DB>,
    ended: bool,
}

impl<DB: sqlx::Database> Drop for CloseUnlessEnded<'_, DB> {
    fn drop(&mut self) {
        if !self.ended {
            // Closing the session makes the server roll the transaction back.
            self.conn.close_on_drop();
        }
    }
}

/// A claim batch with its placeholders filled in: the token as hex, numbers, and `amount`, our
/// own microseconds or `strftime` modifier. Nothing else is spliced, so the text stays safe.
#[allow(dead_code)]
fn fill(
    template: &str,
    token: &[u8; 16],
    amount: &str,
    floor: i64,
    now_ms: i64,
    (id, version): (i64, i64),
) -> String {
    let hex: String = token.iter().map(|b| format!("{b:02x}")).collect();
    template
        .replace("{token}", &hex)
        .replace("{amount}", amount)
        .replace("{floor}", &floor.to_string())
        .replace("{now_ms}", &now_ms.to_string())
        .replace("{id}", &id.to_string())
        .replace("{version}", &version.to_string())
}

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
#[derive(Clone)]
pub struct SqlStrategy {
    backend: Backend,
    table: TableName,
    acquisition: Acquisition,
    amnesia_guard: AmnesiaGuard,
    max_lease_duration: Duration,
    max_clock_offset: Duration,
    queries: Arc<Queries>,
}

impl fmt::Debug for SqlStrategy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SqlStrategy")
            .field("dialect", &self.dialect())
            .field("table", &self.table.as_str())
            .field("acquisition", &self.acquisition)
            .field("amnesia_guard", &self.amnesia_guard)
            .field("max_lease_duration", &self.max_lease_duration)
            .field("max_clock_offset", &self.max_clock_offset)
            .finish_non_exhaustive()
    }
}

impl SqlStrategy {
    fn with_backend(backend: Backend) -> Self {
        let table = TableName::new(DEFAULT_TABLE).unwrap_or_else(|_| unreachable!());
        Self {
            queries: Arc::new(Queries::new(
                backend.dialect(),
                &table,
                AmnesiaGuard::default(),
                hold_off(DEFAULT_MAX_LEASE, DEFAULT_MAX_CLOCK_OFFSET),
            )),
            backend,
            table,
            acquisition: Acquisition::default(),
            amnesia_guard: AmnesiaGuard::default(),
            max_lease_duration: DEFAULT_MAX_LEASE,
            max_clock_offset: DEFAULT_MAX_CLOCK_OFFSET,
        }
    }

    fn rebuild(&mut self) {
        self.queries = Arc::new(Queries::new(
            self.dialect(),
            &self.table,
            self.amnesia_guard,
            self.amnesia_hold_off(),
        ));
    }

    /// Leases in table `no_noncense_leases` of a PostgreSQL database.
    #[cfg(feature = "postgres")]
    #[must_use]
    pub fn postgres(pool: sqlx::PgPool) -> Self {
        Self::with_backend(Backend::Postgres(pool))
    }

    /// Leases in table `no_noncense_leases` of a MySQL or MariaDB database.
    #[cfg(feature = "mysql")]
    #[must_use]
    pub fn mysql(pool: sqlx::MySqlPool) -> Self {
        Self::with_backend(Backend::MySql(pool))
    }

    /// Leases in table `no_noncense_leases` of a SQLite database; open the pool with
    /// [`sqlite_options`](crate::sqlite_options) (file, WAL, busy timeout).
    #[cfg(feature = "sqlite")]
    #[must_use]
    pub fn sqlite(pool: sqlx::SqlitePool) -> Self {
        Self::with_backend(Backend::Sqlite(pool))
    }

    /// A strategy with its own small lazy pool for `url` (`postgres://`, `mysql://`,
    /// `mariadb://`, `sqlite:`); nothing is connected until the first operation, so a database
    /// that is down shows as a retryable error on acquire, not here.
    ///
    /// Query options for lease-sql itself are split off before the driver sees the URL:
    ///
    /// | option | meaning |
    /// |---|---|
    /// | `table=NAME` | [`with_table`](Self::with_table) |
    /// | `max_lease_s=SECONDS` | [`with_max_lease_duration`](Self::with_max_lease_duration) |
    /// | `amnesia_guard=off` (or `hold_off`) | [`with_amnesia_guard`](Self::with_amnesia_guard) |
    /// | `max_clock_offset_s=SECONDS` | [`with_max_clock_offset`](Self::with_max_clock_offset) |
    ///
    /// Every other option must be one the driver reads (`sslmode`, `application_name`,
    /// `ssl-mode`, `charset`, `mode`, ...): a misspelt option is refused, not ignored.
    ///
    /// SQLite URLs get [`sqlite_options`](crate::sqlite_options)' settings (created if missing,
    /// WAL, 5 s busy timeout).
    ///
    /// # Errors
    /// [`SqlError::UnsupportedUrl`] for an unknown scheme or a dialect whose feature is off,
    /// [`SqlError::UnknownUrlOption`] naming an option nobody reads,
    /// [`SqlError::InvalidOption`] for a bad option value, [`SqlError::InvalidTableName`], and
    /// [`SqlError::Connection`] for a URL that does not parse.
    pub fn connect_lazy(url: &str) -> Result<Self, SqlError> {
        let scheme = url.split(':').next().unwrap_or_default();
        match scheme {
            #[cfg(feature = "postgres")]
            "postgres" | "postgresql" => {
                let (url, options) = crate::url::split(url, Dialect::Postgres)?;
                let connect: sqlx::postgres::PgConnectOptions =
                    url.parse().map_err(SqlError::Connection)?;
                Self::postgres(pool_options().connect_lazy_with(connect)).with_url_options(options)
            }
            #[cfg(feature = "mysql")]
            "mysql" | "mariadb" => {
                let (url, options) = crate::url::split(url, Dialect::MySql)?;
                let url = url.replacen("mariadb:", "mysql:", 1);
                let connect: sqlx::mysql::MySqlConnectOptions =
                    url.parse().map_err(SqlError::Connection)?;
                Self::mysql(pool_options().connect_lazy_with(connect)).with_url_options(options)
            }
            #[cfg(feature = "sqlite")]
            "sqlite" => {
                let (url, options) = crate::url::split(url, Dialect::Sqlite)?;
                let connect: sqlx::sqlite::SqliteConnectOptions =
                    url.parse().map_err(SqlError::Connection)?;
                Self::sqlite(pool_options().connect_lazy_with(crate::configure_sqlite(connect)))
                    .with_url_options(options)
            }
            _ => Err(SqlError::UnsupportedUrl(crate::url::redacted_url(url))),
        }
    }

    #[allow(dead_code)]
    fn with_url_options(mut self, options: crate::url::UrlOptions) -> Result<Self, SqlError> {
        if let Some(table) = options.table {
            self = self.with_table(&table)?;
        }
        if let Some(max) = options.max_lease_duration {
            self = self.with_max_lease_duration(max)?;
        }
        if let Some(guard) = options.amnesia_guard {
            self = self.with_amnesia_guard(guard);
        }
        if let Some(max) = options.max_clock_offset {
            self = self.with_max_clock_offset(max)?;
        }
        Ok(self)
    }

    /// Uses table `name` instead of `no_noncense_leases`: a lowercase identifier, optionally
    /// `schema.table`.
    ///
    /// # Errors
    /// [`SqlError::InvalidTableName`] for anything else, [`SqlError::InvalidOption`] for
    /// `nononce_coordinator`, the coordinator table's name.
    pub fn with_table(mut self, name: &str) -> Result<Self, SqlError> {
        let table = TableName::new(name)?;
        if table.is_coordinator() {
            return Err(SqlError::InvalidOption(format!(
                "`{name}` is lease-sql's coordinator table: pick another lease table name"
            )));
        }
        self.table = table;
        self.rebuild();
        Ok(self)
    }

    /// Chooses how free rows are claimed on PostgreSQL and MySQL (default:
    /// [`Acquisition::SkipLocked`]).
    #[must_use]
    pub fn with_acquisition(mut self, acquisition: Acquisition) -> Self {
        self.acquisition = match acquisition {
            Acquisition::Optimistic { candidates } => Acquisition::Optimistic {
                candidates: candidates.max(1),
            },
            other @ Acquisition::SkipLocked => other,
        };
        self
    }

    /// Sets the longest lease any node of the deployment may hold (default 8 h, the lease
    /// duration of NoNoncense and `lease-core`). Requests for longer are granted this long; the
    /// amnesia guard holds acquisition off for this long (plus twice
    /// [`max_clock_offset`](Self::with_max_clock_offset)) after it notices a changed server. It
    /// must not be below the lease manager's `min_ttl` (30 s by default): the manager's start
    /// fails with [`SqlError::MaxLeaseBelowMinTtl`] if it is
    /// ([`Strategy::check_config`](lease_core::Strategy::check_config)).
    ///
    /// # Errors
    /// [`SqlError::InvalidOption`] below 1 ms or above 366 days.
    pub fn with_max_lease_duration(mut self, max: Duration) -> Result<Self, SqlError> {
        if max < Duration::from_millis(1) || max > MAX_DURATION {
            return Err(SqlError::InvalidOption(format!(
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
    /// [`SqlError::InvalidOption`] when the hold-off would pass 366 days.
    pub fn with_max_clock_offset(mut self, max: Duration) -> Result<Self, SqlError> {
        if hold_off(self.max_lease_duration, max) > MAX_DURATION {
            return Err(SqlError::InvalidOption(format!(
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
        self.backend.dialect()
    }
}

impl Backend {
    fn dialect(&self) -> Dialect {
        match self {
            #[cfg(feature = "postgres")]
            Backend::Postgres(_) => Dialect::Postgres,
            #[cfg(feature = "mysql")]
            Backend::MySql(_) => Dialect::MySql,
            #[cfg(feature = "sqlite")]
            Backend::Sqlite(_) => Dialect::Sqlite,
            Backend::Never(never) => match *never {},
        }
    }
}

impl SqlStrategy {
    /// The lease table's name.
    #[must_use]
    pub fn table(&self) -> &str {
        self.table.as_str()
    }

    /// How free rows are claimed.
    #[must_use]
    pub const fn acquisition(&self) -> Acquisition {
        self.acquisition
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

    /// How long the amnesia guard holds acquisition off after it noticed a changed server:
    /// `max_lease_duration + 2 × max_clock_offset`.
    #[must_use]
    pub fn amnesia_hold_off(&self) -> Duration {
        hold_off(self.max_lease_duration, self.max_clock_offset)
    }

    /// The amnesia guard.
    #[must_use]
    pub const fn amnesia_guard(&self) -> AmnesiaGuard {
        self.amnesia_guard
    }

    /// A requested lease duration, shortened to the longest lease.
    fn lease_amount(&self, requested: Duration) -> Result<Amount, SqlError> {
        if requested > MAX_DURATION {
            return Err(SqlError::DurationTooLong(requested));
        }
        Amount::new(requested.min(self.max_lease_duration), self.dialect())
    }

    /// Whether acquisitions check the server's identity (guard on, and not SQLite).
    fn guarded(&self) -> bool {
        self.amnesia_guard == AmnesiaGuard::HoldOff && self.dialect() != Dialect::Sqlite
    }

    /// As [`error`](Self::error); and when the pool gave up waiting for a connection, which
    /// sqlx reports without a cause, one direct connection finds the cause (refused, unknown
    /// host, credentials, TLS) and the error is classified by that.
    async fn explain(&self, error: sqlx::Error) -> SqlError {
        if matches!(error, sqlx::Error::PoolTimedOut)
            && let Some(cause) = self.direct_connection_error().await
        {
            return self.error(cause);
        }
        self.error(error)
    }

    /// `Ok` of an operation, or its error [explained](Self::explain).
    async fn checked<T>(&self, result: Result<T, sqlx::Error>) -> Result<T, SqlError> {
        match result {
            Ok(value) => Ok(value),
            Err(error) => Err(self.explain(error).await),
        }
    }

    /// Why one connection with the pool's settings fails, or `None` when it opens (the pool
    /// was only busy) or does not answer within [`DIRECT_CONNECT_TIMEOUT`].
    async fn direct_connection_error(&self) -> Option<sqlx::Error> {
        use sqlx::{ConnectOptions, Connection};
        let attempt = async {
            let connected: Result<(), sqlx::Error> = match &self.backend {
                #[cfg(feature = "postgres")]
                Backend::Postgres(pool) => pool.connect_options().connect().await?.close().await,
                #[cfg(feature = "mysql")]
                Backend::MySql(pool) => pool.connect_options().connect().await?.close().await,
                #[cfg(feature = "sqlite")]
                Backend::Sqlite(pool) => pool.connect_options().connect().await?.close().await,
                Backend::Never(never) => match *never {},
            };
            connected
        };
        tokio::time::timeout(DIRECT_CONNECT_TIMEOUT, attempt)
            .await
            .ok()?
            .err()
    }

    fn error(&self, error: sqlx::Error) -> SqlError {
        // A missing or unreadable coordinator table is named as such.
        let coordinator = matches!(
            &error,
            sqlx::Error::Database(db) if db.message().contains(COORDINATOR_TABLE)
        );
        let table = if coordinator {
            self.table.coordinator()
        } else {
            self.table.clone()
        };
        SqlError::from_sqlx(error, table.as_str(), self.dialect())
    }

    /// Creates the lease table if it does not exist, adds the `floor_ms` column to a table made
    /// before it existed, and adds whichever of the 512 rows are missing; returns how many rows
    /// it added (0 when everything was there). On PostgreSQL and MySQL/MariaDB it also creates
    /// the coordinator table and, if the lease table has no entry there yet, records the
    /// current server as the one that granted its leases.
    ///
    /// Idempotent and safe to run from several nodes at once (PostgreSQL and MySQL serialize it
    /// with an advisory lock, SQLite with a write transaction). It runs the statements of
    /// [`migration_sql`](crate::migration_sql) with this strategy's table name (and, on SQLite,
    /// adds `floor_ms` after checking `PRAGMA table_info`).
    ///
    /// # Errors
    /// [`SqlError::PermissionDenied`] when the user may not create the table,
    /// [`SqlError::WrongSchema`] when a table of that name exists with other columns, and the
    /// connection errors of any operation.
    pub async fn migrate(&self) -> Result<u64, SqlError> {
        let statements = crate::migration::statements(self.dialect(), &self.table);
        self.checked(self.run_migration(&statements).await).await
    }

    async fn run_migration(&self, statements: &[String]) -> Result<u64, sqlx::Error> {
        let t = self.table.quoted(self.dialect());
        let create = format!("CREATE TABLE IF NOT EXISTS {t}");
        // Names every column, so a table of that name with other columns fails here, before
        // anything is added to it.
        let probe_sql = format!(
            "SELECT COUNT(*) FROM {t} WHERE id IS NOT NULL OR token IS NOT NULL \
             OR lock_version IS NOT NULL OR expires_at IS NOT NULL"
        );
        let probe = || AssertSqlSafe(probe_sql.as_str());
        let add_floor_sql =
            format!("ALTER TABLE {t} ADD COLUMN floor_ms integer NOT NULL DEFAULT 0");
        let columns = || AssertSqlSafe(Arc::clone(&self.queries.columns));
        let sqlite = self.dialect() == Dialect::Sqlite;
        let added = |before: i64, after: i64| u64::try_from(after - before).unwrap_or(0);
        #[allow(unused_macros)]
        macro_rules! migrate_on {
            ($conn:expr) => {{
                let mut before = 0;
                for statement in statements {
                    sqlx::raw_sql(AssertSqlSafe(statement.as_str()))
                        .execute($conn)
                        .await?;
                    if statement.starts_with(&create) {
                        before = sqlx::query(probe()).fetch_one($conn).await?.try_get(0)?;
                        if sqlite {
                            let names: Vec<String> = sqlx::query(columns())
                                .fetch_all($conn)
                                .await?
                                .iter()
                                .map(|r| r.try_get(0))
                                .collect::<Result<_, _>>()?;
                            if !names.iter().any(|n| n == "floor_ms") {
                                sqlx::raw_sql(AssertSqlSafe(add_floor_sql.as_str()))
                                    .execute($conn)
                                    .await?;
                            }
                        }
                    }
                }
                let after: i64 = sqlx::query(probe()).fetch_one($conn).await?.try_get(0)?;
                Ok::<u64, sqlx::Error>(added(before, after))
            }};
        }
        match &self.backend {
            #[cfg(feature = "postgres")]
            Backend::Postgres(pool) => {
                let mut tx = pool.begin().await?;
                // Serializes concurrent migrations (CREATE TABLE IF NOT EXISTS can race): of the
                // coordinator table, shared by every lease table of the schema, then of ours.
                for name in [self.table.coordinator(), self.table.clone()] {
                    sqlx::query("SELECT pg_advisory_xact_lock(hashtext($1))")
                        .bind(format!("nononce:{}", name.as_str()))
                        .execute(&mut *tx)
                        .await?;
                }
                let added = migrate_on!(&mut *tx)?;
                tx.commit().await?;
                Ok(added)
            }
            #[cfg(feature = "mysql")]
            Backend::MySql(pool) => {
                let mut conn = pool.acquire().await?;
                let lock: String = format!("nononce:{}", self.table.as_str())
                    .chars()
                    .take(64)
                    .collect();
                let got: Option<i64> = sqlx::query("SELECT GET_LOCK(?, 30)")
                    .bind(&lock)
                    .fetch_one(&mut *conn)
                    .await?
                    .try_get(0)?;
                if got != Some(1) {
                    return Err(sqlx::Error::Protocol(
                        "timed out waiting for another node's migration of the lease table".into(),
                    ));
                }
                let result = async { migrate_on!(&mut *conn) }.await;
                sqlx::query("SELECT RELEASE_LOCK(?)")
                    .bind(&lock)
                    .execute(&mut *conn)
                    .await?;
                result
            }
            #[cfg(feature = "sqlite")]
            Backend::Sqlite(pool) => {
                let mut tx = pool.begin_with("BEGIN IMMEDIATE").await?;
                let added = migrate_on!(&mut *tx)?;
                tx.commit().await?;
                Ok(added)
            }
            Backend::Never(never) => match *never {},
        }
    }

    /// How many machine IDs are free right now (expired, by the database clock).
    ///
    /// # Errors
    /// The errors of any operation on the table.
    pub async fn free_count(&self) -> Result<u64, SqlError> {
        self.checked(self.count_free().await)
            .await
            .map(|n| u64::try_from(n).unwrap_or(0))
    }

    /// Every held ID (not yet expired on the database clock) with a token prefix and the time
    /// left, in ID order: who holds which ID.
    ///
    /// # Errors
    /// The errors of any operation on the table.
    pub async fn holders(&self) -> Result<Vec<Holder>, SqlError> {
        self.checked(self.fetch_holders().await).await
    }

    async fn fetch_holders(&self) -> Result<Vec<Holder>, sqlx::Error> {
        let sql = AssertSqlSafe(Arc::clone(&self.queries.holders));
        let rows: Vec<(i64, Option<Vec<u8>>, i64)> =
            on_pool!(&self.backend, |pool| sqlx::query(sql)
                .fetch_all(pool)
                .await?
                .iter()
                .map(|r| Ok((r.try_get(0)?, r.try_get(1)?, r.try_get(2)?)))
                .collect::<Result<_, sqlx::Error>>()?);
        rows.into_iter()
            .map(|(id, token, micros)| {
                let machine_id =
                    machine_id(id).map_err(|e| sqlx::Error::Protocol(e.to_string()))?;
                let token = token.unwrap_or_default();
                let hex: String = token.iter().map(|b| format!("{b:02x}")).collect();
                let left = Duration::from_micros(u64::try_from(micros).unwrap_or(0));
                Ok(Holder::new(machine_id, &hex, left))
            })
            .collect()
    }

    /// Frees `id` at once, whoever holds it: its token is cleared and its expiry reset to the
    /// seed value, 1970-01-01; its timestamp floor stays. Only for a node known to be dead; a
    /// live holder finds out at its next renewal (*lost*), and may have used the ID until then.
    /// Returns whether the ID was held.
    ///
    /// # Errors
    /// The errors of any operation on the table.
    pub async fn force_release(&self, id: MachineId) -> Result<bool, SqlError> {
        let sql = AssertSqlSafe(Arc::clone(&self.queries.force_release));
        let id = i16::try_from(id.get()).unwrap_or(-1);
        let result: Result<u64, sqlx::Error> = on_pool!(&self.backend, |pool| sqlx::query(sql)
            .bind(id)
            .execute(pool)
            .await
            .map(|r| r.rows_affected()));
        self.checked(result).await.map(|n| n == 1)
    }

    async fn count_free(&self) -> Result<i64, sqlx::Error> {
        let sql = AssertSqlSafe(Arc::clone(&self.queries.count_free));
        on_pool!(&self.backend, |pool| sqlx::query(sql)
            .fetch_one(pool)
            .await?
            .try_get(0))
    }

    /// One claim attempt: the preferred free row (floor below `now_ms`), guarded by the
    /// server's identity when the amnesia guard is on.
    #[allow(unused_variables)]
    async fn claim(
        &self,
        token: &[u8; 16],
        amount: &Amount,
        now_ms: i64,
        floor: i64,
    ) -> Result<Claim, sqlx::Error> {
        let q = &self.queries;
        let sql = |s: &Arc<str>| AssertSqlSafe(Arc::clone(s));
        match (&self.backend, self.acquisition) {
            #[cfg(feature = "postgres")]
            (Backend::Postgres(pool), Acquisition::SkipLocked) => {
                let row = sqlx::query(sql(&q.claim_preferred))
                    .bind(&token[..])
                    .bind(amount.micros)
                    .bind(floor)
                    .bind(now_ms)
                    .fetch_optional(pool)
                    .await?;
                match row {
                    Some(row) => Ok(Claim::Won {
                        id: row.try_get(0)?,
                        floor: row.try_get(1)?,
                        coordinator_ms: Some(row.try_get(2)?),
                    }),
                    None => Ok(Claim::None { tried: 0 }),
                }
            }
            #[cfg(feature = "postgres")]
            (Backend::Postgres(pool), Acquisition::Optimistic { candidates }) => {
                let rows = sqlx::query(sql(&q.candidates))
                    .bind(now_ms)
                    .bind(i64::from(candidates))
                    .fetch_all(pool)
                    .await?;
                for row in &rows {
                    let (id, version, before): (i64, i64, i64) =
                        (row.try_get(0)?, row.try_get(1)?, row.try_get(2)?);
                    let won = sqlx::query(sql(&q.claim_version))
                        .bind(&token[..])
                        .bind(amount.micros)
                        .bind(floor)
                        .bind(i16::try_from(id).unwrap_or(-1))
                        .bind(i32::try_from(version).unwrap_or(-1))
                        .fetch_optional(pool)
                        .await?;
                    if let Some(won) = won {
                        return Ok(Claim::Won {
                            id,
                            floor: before,
                            coordinator_ms: Some(won.try_get(0)?),
                        });
                    }
                }
                Ok(Claim::None { tried: rows.len() })
            }
            #[cfg(feature = "mysql")]
            (Backend::MySql(pool), Acquisition::SkipLocked) => {
                let mut conn = pool.acquire().await?;
                self.mysql_claim_locked(&mut conn, token, amount, now_ms, floor)
                    .await
            }
            #[cfg(feature = "mysql")]
            (Backend::MySql(pool), Acquisition::Optimistic { candidates }) => {
                // Read and claims on one connection: the guard in the read then vouches for
                // the server the claims reach (a failover breaks the connection).
                let mut conn = pool.acquire().await?;
                let rows = sqlx::query(sql(&q.candidates))
                    .bind(now_ms)
                    .bind(i64::from(candidates))
                    .fetch_all(&mut *conn)
                    .await?;
                for row in &rows {
                    let (id, version, before, read_at): (i64, i64, i64, i64) = (
                        row.try_get(0)?,
                        row.try_get(1)?,
                        row.try_get(2)?,
                        row.try_get(3)?,
                    );
                    let done = sqlx::query(sql(&q.claim_version))
                        .bind(&token[..])
                        .bind(amount.micros)
                        .bind(floor)
                        .bind(id)
                        .bind(version)
                        .execute(&mut *conn)
                        .await?;
                    if done.rows_affected() == 1 {
                        let clock = i64::try_from(done.last_insert_id()).unwrap_or(read_at);
                        return Ok(Claim::Won {
                            id,
                            floor: before,
                            coordinator_ms: Some(clock),
                        });
                    }
                }
                Ok(Claim::None { tried: rows.len() })
            }
            #[cfg(feature = "sqlite")]
            (Backend::Sqlite(pool), _) => {
                // One round trip to the connection's thread: the write lock is held briefly.
                let mut conn = pool.acquire().await?;
                let mut open = CloseUnlessEnded {
                    conn: &mut conn,
                    ended: false,
                };
                let batch = fill(
                    &q.claim_batch,
                    token,
                    &amount.modifier,
                    floor,
                    now_ms,
                    (0, 0),
                );
                let rows = sqlx::raw_sql(AssertSqlSafe(batch))
                    .fetch_all(&mut **open.conn)
                    .await?;
                open.ended = true;
                match rows.first() {
                    Some(row) => Ok(Claim::Won {
                        id: row.try_get(0)?,
                        floor: row.try_get(1)?,
                        coordinator_ms: Some(row.try_get(2)?),
                    }),
                    None => Ok(Claim::None { tried: 0 }),
                }
            }
            (Backend::Never(never), _) => match *never {},
        }
    }

    /// MySQL/MariaDB `SKIP LOCKED` claim in two round trips: isolation level, `START
    /// TRANSACTION` and the locking read (with the guard) in one; the claim and `COMMIT` in the
    /// other. Multi-statement text, so the values are spliced in: integers and the token as hex.
    #[cfg(feature = "mysql")]
    async fn mysql_claim_locked(
        &self,
        conn: &mut sqlx::pool::PoolConnection<sqlx::MySql>,
        token: &[u8; 16],
        amount: &Amount,
        now_ms: i64,
        floor: i64,
    ) -> Result<Claim, sqlx::Error> {
        let q = &self.queries;
        let mut open = CloseUnlessEnded { conn, ended: false };
        let read = |preferred: bool| {
            let prefer = if preferred {
                format!(" AND floor_ms < {now_ms}")
            } else {
                String::new()
            };
            format!("{}{prefer}{}", q.lock_head, q.lock_tail)
        };
        // A caller passing no clock (0) prefers nothing: one read is enough.
        let preferred = now_ms > 0;
        let begin = format!(
            "SET TRANSACTION ISOLATION LEVEL READ COMMITTED; START TRANSACTION; {}",
            read(preferred)
        );
        let mut rows = sqlx::raw_sql(AssertSqlSafe(begin))
            .fetch_all(&mut **open.conn)
            .await?;
        if rows.is_empty() && preferred {
            rows = sqlx::raw_sql(AssertSqlSafe(read(false)))
                .fetch_all(&mut **open.conn)
                .await?;
        }
        let Some(row) = rows.first() else {
            sqlx::raw_sql("ROLLBACK").execute(&mut **open.conn).await?;
            open.ended = true;
            return Ok(Claim::None { tried: 0 });
        };
        let (id, version, before, clock): (i64, i64, i64, i64) = (
            row.try_get(0)?,
            row.try_get(1)?,
            row.try_get(2)?,
            row.try_get(3)?,
        );
        let claim = fill(
            &q.claim_batch,
            token,
            &amount.micros.to_string(),
            floor,
            now_ms,
            (id, version),
        );
        let done = sqlx::raw_sql(AssertSqlSafe(claim))
            .execute(&mut **open.conn)
            .await?;
        open.ended = true;
        if done.rows_affected() == 1 {
            Ok(Claim::Won {
                id,
                floor: before,
                coordinator_ms: Some(clock),
            })
        } else {
            Ok(Claim::None { tried: 1 })
        }
    }

    /// Reads what the database says about the server and the table after a guarded claim
    /// found nothing.
    async fn diagnose(&self) -> Result<Diagnosis, sqlx::Error> {
        let sql = AssertSqlSafe(Arc::clone(&self.queries.diagnose));
        on_pool!(&self.backend, |pool| {
            let row = sqlx::query(sql).fetch_one(pool).await?;
            let claimed: i64 = match row.try_get::<bool, _>(5) {
                Ok(claimed) => i64::from(claimed),
                Err(_) => row.try_get(5)?,
            };
            Ok(Diagnosis {
                current: row.try_get(0)?,
                recorded: row.try_get(1)?,
                previous: row.try_get(2)?,
                remaining_us: row.try_get(3)?,
                free: row.try_get(4)?,
                claimed: claimed != 0,
            })
        })
    }

    /// Records `identity` for the table if nothing is recorded: trusted (no hold-off) or from
    /// now on.
    async fn record(&self, identity: &str, trusted: bool) -> Result<(), sqlx::Error> {
        let sql = AssertSqlSafe(Arc::clone(&self.queries.record));
        on_pool!(&self.backend, |pool| sqlx::query(sql)
            .bind(identity)
            .bind(trusted)
            .execute(pool)
            .await
            .map(|_| ()))
    }

    /// Replaces the recorded server `recorded` by `current`, from now on (a no-op if another
    /// node did it first).
    async fn replace(&self, current: &str, recorded: &str) -> Result<(), sqlx::Error> {
        let sql = AssertSqlSafe(Arc::clone(&self.queries.replace));
        on_pool!(&self.backend, |pool| sqlx::query(sql)
            .bind(current)
            .bind(recorded)
            .execute(pool)
            .await
            .map(|_| ()))
    }

    /// The error for a claim that found nothing: exhausted, a lost race, or held off. `Ok` when
    /// the server was just recorded as trusted and the claim may be tried again.
    async fn nothing_claimed(&self, tried: usize) -> Result<(), SqlError> {
        let fail = |e| self.error(e);
        let free = if self.guarded() {
            let table = self.table.as_str().to_owned();
            let held_off = |previous, current, remaining| SqlError::ServerChanged {
                table: table.clone(),
                previous,
                current,
                remaining,
            };
            match self.diagnose().await.map_err(fail)?.verdict() {
                Verdict::Standby => return Err(SqlError::Standby),
                Verdict::Trust { current } => {
                    self.record(&current, true).await.map_err(fail)?;
                    return Ok(());
                }
                Verdict::RecordAndHoldOff { current } => {
                    self.record(&current, false).await.map_err(fail)?;
                    return Err(held_off(None, current, self.amnesia_hold_off()));
                }
                Verdict::Changed { recorded, current } => {
                    self.replace(&current, &recorded).await.map_err(fail)?;
                    return Err(held_off(Some(recorded), current, self.amnesia_hold_off()));
                }
                Verdict::HoldOff {
                    previous,
                    current,
                    remaining,
                } => return Err(held_off(previous, current, remaining)),
                Verdict::Passed { free } => free,
            }
        } else {
            self.count_free().await.map_err(fail)?
        };
        // Free rows that we could not claim are being claimed by others right now.
        if free > 0 || tried > 0 {
            Err(SqlError::Conflict {
                candidates: tried.max(usize::try_from(free).unwrap_or(0)),
            })
        } else {
            Err(SqlError::Exhausted {
                table: self.table.as_str().to_owned(),
            })
        }
    }

    /// Raises `id`'s floor to at least `floor`, whoever holds it.
    async fn raise_floor(&self, id: MachineId, floor: i64) -> Result<(), sqlx::Error> {
        let sql = AssertSqlSafe(Arc::clone(&self.queries.raise_floor));
        let id = i16::try_from(id.get()).unwrap_or(-1);
        on_pool!(&self.backend, |pool| sqlx::query(sql)
            .bind(floor)
            .bind(id)
            .execute(pool)
            .await
            .map(|_| ()))
    }

    /// Runs the renew or release statement; `None` when the row (id and token) did not match,
    /// else the database clock (Unix ms) if the dialect reports it.
    #[allow(unused_variables)]
    async fn update_own(
        &self,
        sql: &Arc<str>,
        lease: &SqlLease,
        amount: &Amount,
        floor: Option<i64>,
        returns_clock: bool,
    ) -> Result<Option<Option<i64>>, sqlx::Error> {
        let sql = AssertSqlSafe(Arc::clone(sql));
        let id = i16::try_from(lease.machine_id.get()).unwrap_or(-1);
        let token = &lease.token[..];
        #[allow(unused_macros)]
        macro_rules! run {
            ($pool:expr, $amount:expr) => {{
                let query = sqlx::query(sql)
                    .bind($amount)
                    .bind(floor)
                    .bind(id)
                    .bind(token);
                if returns_clock {
                    match query.fetch_optional($pool).await? {
                        Some(row) => Some(Some(row.try_get(0)?)),
                        None => None,
                    }
                } else {
                    let done = query.execute($pool).await?;
                    (done.rows_affected() == 1).then_some(None)
                }
            }};
        }
        Ok(match &self.backend {
            #[cfg(feature = "postgres")]
            Backend::Postgres(pool) => run!(pool, amount.micros),
            #[cfg(feature = "mysql")]
            Backend::MySql(pool) => {
                let done = sqlx::query(sql)
                    .bind(amount.micros)
                    .bind(floor)
                    .bind(id)
                    .bind(token)
                    .execute(pool)
                    .await?;
                (done.rows_affected() == 1).then(|| {
                    // The renewal reports the clock through LAST_INSERT_ID(expr).
                    returns_clock
                        .then(|| i64::try_from(done.last_insert_id()).ok())
                        .flatten()
                })
            }
            #[cfg(feature = "sqlite")]
            Backend::Sqlite(pool) => run!(pool, amount.modifier.as_str()),
            Backend::Never(never) => match *never {},
        })
    }
}

impl Strategy for SqlStrategy {
    type Lease = SqlLease;
    type Error = SqlError;

    /// Refuses a longest lease below the manager's `min_ttl`: every grant would be an illegal
    /// TTL. Compared in whole milliseconds, as the manager compares, with the duration the
    /// database applies (SQLite: whole milliseconds).
    fn check_config(&self, config: &lease_core::LeaseConfig) -> Result<(), SqlError> {
        let max_lease = Amount::new(self.max_lease_duration, self.dialect())?.applied;
        let min_ttl = config.min_ttl();
        if max_lease.as_millis() < min_ttl.as_millis() {
            return Err(SqlError::MaxLeaseBelowMinTtl { max_lease, min_ttl });
        }
        Ok(())
    }

    async fn acquire(&self, requested: Duration) -> Result<Grant<SqlLease>, SqlError> {
        self.acquire_with_floor(requested, 0, 0).await
    }

    async fn renew(
        &self,
        lease: &SqlLease,
        requested: Duration,
    ) -> Result<Renewal<SqlLease>, SqlError> {
        self.renew_with_floor(lease, requested, 0).await
    }

    async fn release(&self, lease: &SqlLease, guard: Duration) -> Result<(), SqlError> {
        let amount = Amount::new(guard, self.dialect())?;
        // A row that no longer carries our token is someone else's: leave it alone. No floor:
        // the stored one stays. The token is cleared, so a renewal that arrives later is lost.
        self.checked(
            self.update_own(&self.queries.release, lease, &amount, None, false)
                .await,
        )
        .await
        .map(|_| ())
    }

    fn records_floor(&self) -> bool {
        true
    }

    async fn acquire_with_floor(
        &self,
        requested: Duration,
        now_ms: u64,
        floor_ms: u64,
    ) -> Result<Grant<SqlLease>, SqlError> {
        let amount = self.lease_amount(requested)?;
        let token = new_token()?;
        // A second attempt only after a table without a record was recorded as trusted.
        for _ in 0..2 {
            match self
                .checked(
                    self.claim(&token, &amount, signed(now_ms), signed(floor_ms))
                        .await,
                )
                .await?
            {
                Claim::Won {
                    id,
                    floor,
                    coordinator_ms,
                } => {
                    let machine_id = machine_id(id)?;
                    let grant =
                        Grant::new(machine_id, SqlLease { machine_id, token }, amount.applied)
                            .with_floor(unsigned(floor));
                    return Ok(match coordinator_ms {
                        Some(ms) if self.guarded() => grant
                            .with_coordinator_ms(unsigned(ms))
                            .with_max_clock_offset(self.max_clock_offset),
                        Some(ms) => grant.with_coordinator_ms(unsigned(ms)),
                        None => grant,
                    });
                }
                Claim::None { tried } => self.nothing_claimed(tried).await?,
            }
        }
        Err(SqlError::Conflict { candidates: 0 })
    }

    async fn renew_with_floor(
        &self,
        lease: &SqlLease,
        requested: Duration,
        floor_ms: u64,
    ) -> Result<Renewal<SqlLease>, SqlError> {
        let amount = self.lease_amount(requested)?;
        let matched = self
            .checked(
                self.update_own(
                    &self.queries.renew,
                    lease,
                    &amount,
                    Some(signed(floor_ms)),
                    true,
                )
                .await,
            )
            .await?;
        match matched {
            Some(clock) => {
                let renewal = Renewal::new(*lease, amount.applied);
                Ok(match clock {
                    Some(ms) if self.guarded() => renewal
                        .with_coordinator_ms(unsigned(ms))
                        .with_max_clock_offset(self.max_clock_offset),
                    Some(ms) => renewal.with_coordinator_ms(unsigned(ms)),
                    None => renewal,
                })
            }
            None => Err(SqlError::Lost {
                machine_id: lease.machine_id,
            }),
        }
    }

    async fn release_with_floor(
        &self,
        lease: &SqlLease,
        guard: Duration,
        floor_ms: u64,
    ) -> Result<(), SqlError> {
        let amount = Amount::new(guard, self.dialect())?;
        let released = self
            .checked(
                self.update_own(
                    &self.queries.release,
                    lease,
                    &amount,
                    Some(signed(floor_ms)),
                    false,
                )
                .await,
            )
            .await?;
        if released.is_none() {
            // Not ours any more (expired, taken over, or forgotten by a database that lost
            // writes): only raise the floor, so what was issued under the lease is known.
            self.checked(self.raise_floor(lease.machine_id, signed(floor_ms)).await)
                .await?;
        }
        Ok(())
    }

    fn name(&self) -> &'static str {
        self.dialect().as_str()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lease_debug_shows_the_id_and_a_token_prefix_only() {
        let lease = SqlLease::from_parts(MachineId::new(42).unwrap(), [0xab; 16]);
        let shown = format!("{lease:?}");
        assert!(shown.contains("42"), "{shown}");
        assert!(shown.contains("abababab…"), "{shown}");
        assert!(!shown.contains(&"ab".repeat(5)), "{shown}");
    }

    #[test]
    fn amounts_are_whole_microseconds_or_milliseconds() {
        let d = Duration::from_nanos(1_234_567_891);
        let pg = Amount::new(d, Dialect::Postgres).unwrap();
        assert_eq!(pg.micros, 1_234_567);
        assert_eq!(pg.applied, Duration::from_micros(1_234_567));
        let lite = Amount::new(d, Dialect::Sqlite).unwrap();
        assert_eq!(lite.applied, Duration::from_millis(1_234));
        assert_eq!(lite.modifier, "+1.234 seconds");
        assert!(matches!(
            Amount::new(MAX_DURATION + Duration::from_secs(1), Dialect::MySql),
            Err(SqlError::DurationTooLong(_))
        ));
    }
}
