//! [`SqlStrategy`]: the lease protocol over one table, for each dialect.

use core::fmt;
use std::sync::Arc;
use std::time::Duration;

use lease_core::{Grant, Holder, MachineId, Renewal, Strategy};
#[allow(unused_imports)]
use sqlx::{AssertSqlSafe, Row};

use crate::table::{DEFAULT_TABLE, TableName};
use crate::{Dialect, SqlError};

/// The longest lease duration the strategy accepts.
const MAX_DURATION: Duration = Duration::from_secs(366 * 24 * 3600);

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
/// another node can neither extend nor free the new holder's lease.
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

/// The statements for one dialect and table, built once.
// Which fields are read depends on the dialect features enabled.
#[cfg_attr(
    not(all(feature = "postgres", feature = "mysql", feature = "sqlite")),
    allow(dead_code)
)]
struct Queries {
    /// Claim the lowest free row in one statement (PostgreSQL, SQLite), returning its id.
    claim_lowest: Arc<str>,
    /// Lock the lowest free row (MySQL), returning id and lock_version.
    lock_lowest: Arc<str>,
    /// Up to `?` free rows in random order: id, lock_version.
    candidates: Arc<str>,
    /// Claim a row if its version is unchanged.
    claim_version: Arc<str>,
    renew: Arc<str>,
    release: Arc<str>,
    count_free: Arc<str>,
    /// Held rows: id, token, microseconds left.
    holders: Arc<str>,
    /// Free one held row at once, whoever holds it.
    force_release: Arc<str>,
}

impl Queries {
    fn new(dialect: Dialect, table: &TableName) -> Self {
        let t = table.quoted(dialect);
        let q = |s: String| Arc::<str>::from(s);
        match dialect {
            Dialect::Postgres => {
                let now = "(CURRENT_TIMESTAMP AT TIME ZONE 'UTC')";
                let until = |p: &str| format!("({now} + {p}::bigint * INTERVAL '1 microsecond')");
                Self {
                    claim_lowest: q(format!(
                        "UPDATE {t} SET token = $1, expires_at = {}, lock_version = lock_version + 1 \
                         WHERE id = (SELECT id FROM {t} WHERE expires_at < {now} \
                         ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED) RETURNING id::bigint",
                        until("$2")
                    )),
                    lock_lowest: q(String::new()),
                    candidates: q(format!(
                        "SELECT id::bigint, lock_version::bigint FROM {t} WHERE expires_at < {now} \
                         ORDER BY random() LIMIT $1"
                    )),
                    claim_version: q(format!(
                        "UPDATE {t} SET token = $1, expires_at = {}, lock_version = lock_version + 1 \
                         WHERE id = $3 AND lock_version = $4",
                        until("$2")
                    )),
                    renew: q(format!(
                        "UPDATE {t} SET expires_at = {}, lock_version = lock_version + 1 \
                         WHERE id = $2 AND token = $3",
                        until("$1")
                    )),
                    release: q(format!(
                        "UPDATE {t} SET expires_at = LEAST(expires_at, {}), \
                         lock_version = lock_version + 1 WHERE id = $2 AND token = $3",
                        until("$1")
                    )),
                    count_free: q(format!("SELECT COUNT(*) FROM {t} WHERE expires_at < {now}")),
                    holders: q(format!(
                        "SELECT id::bigint, token, \
                         (EXTRACT(EPOCH FROM (expires_at - {now})) * 1000000)::bigint \
                         FROM {t} WHERE NOT (expires_at < {now}) ORDER BY id"
                    )),
                    force_release: q(format!(
                        "UPDATE {t} SET token = NULL, expires_at = TIMESTAMP '1970-01-01 00:00:00', \
                         lock_version = lock_version + 1 WHERE id = $1 AND NOT (expires_at < {now})"
                    )),
                }
            }
            Dialect::MySql => {
                let now = "UTC_TIMESTAMP(6)";
                let until = format!("TIMESTAMPADD(MICROSECOND, ?, {now})");
                Self {
                    claim_lowest: q(String::new()),
                    lock_lowest: q(format!(
                        "SELECT CAST(id AS SIGNED), CAST(lock_version AS SIGNED) FROM {t} \
                         WHERE expires_at < {now} ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED"
                    )),
                    candidates: q(format!(
                        "SELECT CAST(id AS SIGNED), CAST(lock_version AS SIGNED) FROM {t} \
                         WHERE expires_at < {now} ORDER BY RAND() LIMIT ?"
                    )),
                    claim_version: q(format!(
                        "UPDATE {t} SET token = ?, expires_at = {until}, lock_version = lock_version + 1 \
                         WHERE id = ? AND lock_version = ?"
                    )),
                    renew: q(format!(
                        "UPDATE {t} SET expires_at = {until}, lock_version = lock_version + 1 \
                         WHERE id = ? AND token = ?"
                    )),
                    release: q(format!(
                        "UPDATE {t} SET expires_at = LEAST(expires_at, {until}), \
                         lock_version = lock_version + 1 WHERE id = ? AND token = ?"
                    )),
                    count_free: q(format!("SELECT COUNT(*) FROM {t} WHERE expires_at < {now}")),
                    holders: q(format!(
                        "SELECT CAST(id AS SIGNED), token, \
                         CAST(TIMESTAMPDIFF(MICROSECOND, {now}, expires_at) AS SIGNED) \
                         FROM {t} WHERE NOT (expires_at < {now}) ORDER BY id"
                    )),
                    force_release: q(format!(
                        "UPDATE {t} SET token = NULL, expires_at = '1970-01-01 00:00:00', \
                         lock_version = lock_version + 1 WHERE id = ? AND NOT (expires_at < {now})"
                    )),
                }
            }
            Dialect::Sqlite => {
                let now = "strftime('%Y-%m-%d %H:%M:%f', 'now')";
                let until = "strftime('%Y-%m-%d %H:%M:%f', 'now', ?)";
                Self {
                    claim_lowest: q(format!(
                        "UPDATE {t} SET token = ?, expires_at = {until}, lock_version = lock_version + 1 \
                         WHERE id = (SELECT id FROM {t} WHERE expires_at < {now} ORDER BY id LIMIT 1) \
                         RETURNING id"
                    )),
                    lock_lowest: q(String::new()),
                    candidates: q(String::new()),
                    claim_version: q(String::new()),
                    renew: q(format!(
                        "UPDATE {t} SET expires_at = {until}, lock_version = lock_version + 1 \
                         WHERE id = ? AND token = ?"
                    )),
                    release: q(format!(
                        "UPDATE {t} SET expires_at = min(expires_at, {until}), \
                         lock_version = lock_version + 1 WHERE id = ? AND token = ?"
                    )),
                    count_free: q(format!("SELECT COUNT(*) FROM {t} WHERE expires_at < {now}")),
                    holders: q(format!(
                        "SELECT id, token, \
                         CAST(round((julianday(expires_at) - julianday({now})) * 86400000.0) AS INTEGER) * 1000 \
                         FROM {t} WHERE NOT (expires_at < {now}) ORDER BY id"
                    )),
                    force_release: q(format!(
                        "UPDATE {t} SET token = NULL, expires_at = '1970-01-01 00:00:00.000', \
                         lock_version = lock_version + 1 WHERE id = ? AND NOT (expires_at < {now})"
                    )),
                }
            }
        }
    }
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
        let millis = requested.as_millis();
        let applied = match dialect {
            Dialect::Sqlite => Duration::from_millis(u64::try_from(millis).unwrap_or(u64::MAX)),
            Dialect::Postgres | Dialect::MySql => Duration::from_micros(micros.unsigned_abs()),
        };
        Ok(Self {
            micros,
            applied,
            modifier: format!("+{}.{:03} seconds", millis / 1000, millis % 1000),
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
                "lease table row has id {id}, outside 0..=511"
            )))
        })
}

/// A small pool for one node's lease traffic.
#[allow(dead_code)]
fn pool_options<DB: sqlx::Database>() -> sqlx::pool::PoolOptions<DB> {
    sqlx::pool::PoolOptions::new()
        .max_connections(4)
        .acquire_timeout(Duration::from_secs(5))
}

/// The outcome of one claim attempt.
enum Claim {
    Won(i64),
    /// No free row could be claimed after trying `tried` candidates.
    None {
        tried: usize,
    },
}

/// Machine-ID leases in one SQL table, on PostgreSQL, MySQL/MariaDB or SQLite.
///
/// Cheap to clone: clones share the connection pool. See the crate docs for the protocol, the
/// schema and the migration.
#[derive(Clone)]
pub struct SqlStrategy {
    backend: Backend,
    table: TableName,
    acquisition: Acquisition,
    queries: Arc<Queries>,
}

impl fmt::Debug for SqlStrategy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SqlStrategy")
            .field("dialect", &self.dialect())
            .field("table", &self.table.as_str())
            .field("acquisition", &self.acquisition)
            .finish_non_exhaustive()
    }
}

impl SqlStrategy {
    fn with_backend(backend: Backend) -> Self {
        let table = TableName::new(DEFAULT_TABLE).unwrap_or_else(|_| unreachable!());
        let queries = Arc::new(Queries::new(backend.dialect(), &table));
        Self {
            backend,
            table,
            acquisition: Acquisition::default(),
            queries,
        }
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
    /// SQLite URLs get [`sqlite_options`](crate::sqlite_options)' settings (created if missing,
    /// WAL, 5 s busy timeout).
    ///
    /// # Errors
    /// [`SqlError::UnsupportedUrl`] for an unknown scheme or a dialect whose feature is off,
    /// [`SqlError::Connection`] for a URL that does not parse.
    pub fn connect_lazy(url: &str) -> Result<Self, SqlError> {
        let scheme = url.split(':').next().unwrap_or_default();
        match scheme {
            #[cfg(feature = "postgres")]
            "postgres" | "postgresql" => {
                let options: sqlx::postgres::PgConnectOptions =
                    url.parse().map_err(SqlError::Connection)?;
                Ok(Self::postgres(pool_options().connect_lazy_with(options)))
            }
            #[cfg(feature = "mysql")]
            "mysql" | "mariadb" => {
                let url = url.replacen("mariadb:", "mysql:", 1);
                let options: sqlx::mysql::MySqlConnectOptions =
                    url.parse().map_err(SqlError::Connection)?;
                Ok(Self::mysql(pool_options().connect_lazy_with(options)))
            }
            #[cfg(feature = "sqlite")]
            "sqlite" => {
                let options: sqlx::sqlite::SqliteConnectOptions =
                    url.parse().map_err(SqlError::Connection)?;
                Ok(Self::sqlite(
                    pool_options().connect_lazy_with(crate::configure_sqlite(options)),
                ))
            }
            _ => Err(SqlError::UnsupportedUrl(url.to_owned())),
        }
    }

    /// Uses table `name` instead of `no_noncense_leases`: a lowercase identifier, optionally
    /// `schema.table`.
    ///
    /// # Errors
    /// [`SqlError::InvalidTableName`] for anything else.
    pub fn with_table(mut self, name: &str) -> Result<Self, SqlError> {
        self.table = TableName::new(name)?;
        self.queries = Arc::new(Queries::new(self.dialect(), &self.table));
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

    fn error(&self, error: sqlx::Error) -> SqlError {
        SqlError::from_sqlx(error, self.table.as_str(), self.dialect())
    }

    /// Creates the lease table if it does not exist and adds whichever of the 512 rows are
    /// missing; returns how many rows it added (0 when everything was there).
    ///
    /// Idempotent and safe to run from several nodes at once (PostgreSQL and MySQL serialize it
    /// with an advisory lock). It runs the statements of [`migration_sql`](crate::migration_sql)
    /// with this strategy's table name.
    ///
    /// # Errors
    /// [`SqlError::PermissionDenied`] when the user may not create the table,
    /// [`SqlError::WrongSchema`] when a table of that name exists with other columns, and the
    /// connection errors of any operation.
    pub async fn migrate(&self) -> Result<u64, SqlError> {
        let statements = crate::migration::statements(self.dialect(), &self.table);
        self.run_migration(&statements)
            .await
            .map_err(|e| self.error(e))
    }

    async fn run_migration(&self, statements: &[String]) -> Result<u64, sqlx::Error> {
        let count_sql = format!("SELECT COUNT(*) FROM {}", self.table.quoted(self.dialect()));
        let count = || AssertSqlSafe(count_sql.as_str());
        // The first statement creates the table if needed; the rest add missing rows.
        let (create, rest) = statements.split_first().unwrap_or_else(|| unreachable!());
        let create = || AssertSqlSafe(create.as_str());
        let added = |before: i64, after: i64| u64::try_from(after - before).unwrap_or(0);
        #[allow(unused_macros)]
        macro_rules! migrate_on {
            ($conn:expr) => {{
                sqlx::query(create())
                    .persistent(false)
                    .execute($conn)
                    .await?;
                let before: i64 = sqlx::query(count()).fetch_one($conn).await?.try_get(0)?;
                for statement in rest {
                    sqlx::query(AssertSqlSafe(statement.as_str()))
                        .persistent(false)
                        .execute($conn)
                        .await?;
                }
                let after: i64 = sqlx::query(count()).fetch_one($conn).await?.try_get(0)?;
                Ok::<u64, sqlx::Error>(added(before, after))
            }};
        }
        match &self.backend {
            #[cfg(feature = "postgres")]
            Backend::Postgres(pool) => {
                let mut tx = pool.begin().await?;
                // Serializes concurrent migrations (CREATE TABLE IF NOT EXISTS can race).
                sqlx::query("SELECT pg_advisory_xact_lock(hashtext($1))")
                    .bind(format!("nononce:{}", self.table.as_str()))
                    .execute(&mut *tx)
                    .await?;
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
            Backend::Sqlite(pool) => migrate_on!(pool),
            Backend::Never(never) => match *never {},
        }
    }

    /// How many machine IDs are free right now (expired, by the database clock).
    ///
    /// # Errors
    /// The errors of any operation on the table.
    pub async fn free_count(&self) -> Result<u64, SqlError> {
        self.count_free()
            .await
            .map(|n| u64::try_from(n).unwrap_or(0))
            .map_err(|e| self.error(e))
    }

    /// Every held ID (not yet expired on the database clock) with a token prefix and the time
    /// left, in ID order: who holds which ID.
    ///
    /// # Errors
    /// The errors of any operation on the table.
    pub async fn holders(&self) -> Result<Vec<Holder>, SqlError> {
        self.fetch_holders().await.map_err(|e| self.error(e))
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
    /// seed value, 1970-01-01. Only for
    /// a node known to be dead; a live holder finds out at its next renewal (*lost*), and may
    /// have used the ID until then. Returns whether the ID was held.
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
        result.map(|n| n == 1).map_err(|e| self.error(e))
    }

    async fn count_free(&self) -> Result<i64, sqlx::Error> {
        let sql = AssertSqlSafe(Arc::clone(&self.queries.count_free));
        on_pool!(&self.backend, |pool| sqlx::query(sql)
            .fetch_one(pool)
            .await?
            .try_get(0))
    }

    #[allow(unused_variables)]
    async fn claim(&self, token: &[u8; 16], amount: &Amount) -> Result<Claim, sqlx::Error> {
        let q = &self.queries;
        match (&self.backend, self.acquisition) {
            #[cfg(feature = "postgres")]
            (Backend::Postgres(pool), Acquisition::SkipLocked) => {
                let row = sqlx::query(AssertSqlSafe(Arc::clone(&q.claim_lowest)))
                    .bind(&token[..])
                    .bind(amount.micros)
                    .fetch_optional(pool)
                    .await?;
                match row {
                    Some(row) => Ok(Claim::Won(row.try_get(0)?)),
                    None => Ok(Claim::None { tried: 0 }),
                }
            }
            #[cfg(feature = "postgres")]
            (Backend::Postgres(pool), Acquisition::Optimistic { candidates }) => {
                let rows = sqlx::query(AssertSqlSafe(Arc::clone(&q.candidates)))
                    .bind(i64::from(candidates))
                    .fetch_all(pool)
                    .await?;
                for row in &rows {
                    let (id, version): (i64, i64) = (row.try_get(0)?, row.try_get(1)?);
                    let done = sqlx::query(AssertSqlSafe(Arc::clone(&q.claim_version)))
                        .bind(&token[..])
                        .bind(amount.micros)
                        .bind(i16::try_from(id).unwrap_or(-1))
                        .bind(i32::try_from(version).unwrap_or(-1))
                        .execute(pool)
                        .await?;
                    if done.rows_affected() == 1 {
                        return Ok(Claim::Won(id));
                    }
                }
                Ok(Claim::None { tried: rows.len() })
            }
            #[cfg(feature = "mysql")]
            (Backend::MySql(pool), Acquisition::SkipLocked) => {
                let mut conn = pool.acquire().await?;
                sqlx::query("SET TRANSACTION ISOLATION LEVEL READ COMMITTED")
                    .execute(&mut *conn)
                    .await?;
                let mut tx = sqlx::Connection::begin(&mut *conn).await?;
                let row = sqlx::query(AssertSqlSafe(Arc::clone(&q.lock_lowest)))
                    .fetch_optional(&mut *tx)
                    .await?;
                let Some(row) = row else {
                    tx.rollback().await?;
                    return Ok(Claim::None { tried: 0 });
                };
                let (id, version): (i64, i64) = (row.try_get(0)?, row.try_get(1)?);
                let done = sqlx::query(AssertSqlSafe(Arc::clone(&q.claim_version)))
                    .bind(&token[..])
                    .bind(amount.micros)
                    .bind(id)
                    .bind(version)
                    .execute(&mut *tx)
                    .await?;
                if done.rows_affected() == 1 {
                    tx.commit().await?;
                    Ok(Claim::Won(id))
                } else {
                    tx.rollback().await?;
                    Ok(Claim::None { tried: 1 })
                }
            }
            #[cfg(feature = "mysql")]
            (Backend::MySql(pool), Acquisition::Optimistic { candidates }) => {
                let rows = sqlx::query(AssertSqlSafe(Arc::clone(&q.candidates)))
                    .bind(i64::from(candidates))
                    .fetch_all(pool)
                    .await?;
                for row in &rows {
                    let (id, version): (i64, i64) = (row.try_get(0)?, row.try_get(1)?);
                    let done = sqlx::query(AssertSqlSafe(Arc::clone(&q.claim_version)))
                        .bind(&token[..])
                        .bind(amount.micros)
                        .bind(id)
                        .bind(version)
                        .execute(pool)
                        .await?;
                    if done.rows_affected() == 1 {
                        return Ok(Claim::Won(id));
                    }
                }
                Ok(Claim::None { tried: rows.len() })
            }
            #[cfg(feature = "sqlite")]
            (Backend::Sqlite(pool), _) => {
                let row = sqlx::query(AssertSqlSafe(Arc::clone(&q.claim_lowest)))
                    .bind(&token[..])
                    .bind(amount.modifier.as_str())
                    .fetch_optional(pool)
                    .await?;
                match row {
                    Some(row) => Ok(Claim::Won(row.try_get(0)?)),
                    None => Ok(Claim::None { tried: 0 }),
                }
            }
            (Backend::Never(never), _) => match *never {},
        }
    }

    /// Runs the renew or release statement; `true` when the row (id and token) matched.
    #[allow(unused_variables)]
    async fn update_own(
        &self,
        sql: &Arc<str>,
        lease: &SqlLease,
        amount: &Amount,
    ) -> Result<bool, sqlx::Error> {
        let sql = AssertSqlSafe(Arc::clone(sql));
        let id = i16::try_from(lease.machine_id.get()).unwrap_or(-1);
        let token = &lease.token[..];
        let rows: u64 = match &self.backend {
            #[cfg(feature = "postgres")]
            Backend::Postgres(pool) => sqlx::query(sql)
                .bind(amount.micros)
                .bind(id)
                .bind(token)
                .execute(pool)
                .await?
                .rows_affected(),
            #[cfg(feature = "mysql")]
            Backend::MySql(pool) => sqlx::query(sql)
                .bind(amount.micros)
                .bind(id)
                .bind(token)
                .execute(pool)
                .await?
                .rows_affected(),
            #[cfg(feature = "sqlite")]
            Backend::Sqlite(pool) => sqlx::query(sql)
                .bind(amount.modifier.as_str())
                .bind(id)
                .bind(token)
                .execute(pool)
                .await?
                .rows_affected(),
            Backend::Never(never) => match *never {},
        };
        Ok(rows == 1)
    }
}

impl Strategy for SqlStrategy {
    type Lease = SqlLease;
    type Error = SqlError;

    async fn acquire(&self, requested: Duration) -> Result<Grant<SqlLease>, SqlError> {
        let amount = Amount::new(requested, self.dialect())?;
        let token = new_token()?;
        match self
            .claim(&token, &amount)
            .await
            .map_err(|e| self.error(e))?
        {
            Claim::Won(id) => {
                let machine_id = machine_id(id)?;
                Ok(Grant::new(
                    machine_id,
                    SqlLease { machine_id, token },
                    amount.applied,
                ))
            }
            Claim::None { tried } => {
                // Free rows that we could not claim are being claimed by others right now.
                let free = self.count_free().await.map_err(|e| self.error(e))?;
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
        }
    }

    async fn renew(
        &self,
        lease: &SqlLease,
        requested: Duration,
    ) -> Result<Renewal<SqlLease>, SqlError> {
        let amount = Amount::new(requested, self.dialect())?;
        let matched = self
            .update_own(&self.queries.renew, lease, &amount)
            .await
            .map_err(|e| self.error(e))?;
        if matched {
            Ok(Renewal::new(*lease, amount.applied))
        } else {
            Err(SqlError::Lost {
                machine_id: lease.machine_id,
            })
        }
    }

    async fn release(&self, lease: &SqlLease, guard: Duration) -> Result<(), SqlError> {
        let amount = Amount::new(guard, self.dialect())?;
        // A row that no longer carries our token is someone else's: leave it alone.
        self.update_own(&self.queries.release, lease, &amount)
            .await
            .map(|_| ())
            .map_err(|e| self.error(e))
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
