//! Test support: real servers, one table of its own per test, raw access to the rows.
//!
//! Everything for a dialect is compiled with that dialect's feature only, so the tests of one
//! dialect build and run without the others (`--features sqlite` needs no server at all).
#![allow(dead_code, unused_imports)]

#[cfg(feature = "postgres")]
pub mod cluster;
#[cfg(any(feature = "postgres", feature = "mysql"))]
pub mod proxy;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use lease_core::{Acquire, Release, Renew, Strategy};
use lease_sql::sqlx::{self, AssertSqlSafe, Row};
use lease_sql::{Dialect, SqlStrategy};

pub const PG_DEFAULT: &str = "postgres://postgres@127.0.0.1:5432/test";
pub const MYSQL_DEFAULT: &str = "mysql://root@127.0.0.1:3306/test";

pub fn pg_url() -> String {
    std::env::var("NONONCE_TEST_POSTGRES_URL").unwrap_or_else(|_| PG_DEFAULT.to_owned())
}

pub fn mysql_url() -> String {
    std::env::var("NONONCE_TEST_MYSQL_URL").unwrap_or_else(|_| MYSQL_DEFAULT.to_owned())
}

pub const HOUR: Duration = Duration::from_secs(3600);

/// The URL of `dialect`'s shared server.
pub fn server_url(dialect: Dialect) -> String {
    match dialect {
        Dialect::Postgres => pg_url(),
        _ => mysql_url(),
    }
}

/// The server address of a test URL, which names an IP address and port.
pub fn server_addr(url: &str) -> std::net::SocketAddr {
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    let host_port = rest.rsplit('@').next().unwrap().split('/').next().unwrap();
    host_port.parse().unwrap_or_else(|_| {
        panic!(
            "test urls must use an ip address and port: {}",
            lease_sql::redacted_url(url)
        )
    })
}

/// A timestamp floor far below any clock, so that no row counts as ahead of an acquirer by
/// accident.
pub const F: u64 = 1_000_000;

/// This host's clock in Unix ms: the floors' terms for nonces on the default epoch.
pub fn now_ms() -> u64 {
    u64::try_from(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_millis(),
    )
    .unwrap()
}

/// An acquisition of `requested` at this host's clock, recording floor [`F`]: every free row
/// whose floor a test did not put ahead of the clock is preferred alike, so the lowest is
/// claimed.
pub fn acquiring(requested: Duration) -> Acquire {
    Acquire::new(requested, now_ms(), F)
}

/// The ID `s` is granted for an hour.
pub async fn next_id(s: &SqlStrategy) -> u16 {
    s.acquire(acquiring(HOUR)).await.unwrap().machine_id.get()
}

/// A renewal for `requested`, recording floor [`F`].
pub fn renewing(requested: Duration) -> Renew {
    Renew::new(requested, F)
}

/// A release that blocks the ID for `guard`, recording floor [`F`].
pub fn releasing(guard: Duration) -> Release {
    Release::new(guard, F)
}

/// A fresh random suffix.
pub fn suffix() -> String {
    let mut bytes = [0u8; 6];
    getrandom::fill(&mut bytes).unwrap();
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A pool on one of the servers.
#[derive(Clone)]
pub enum Pool {
    #[cfg(feature = "postgres")]
    Pg(sqlx::PgPool),
    #[cfg(feature = "mysql")]
    My(sqlx::MySqlPool),
    #[cfg(feature = "sqlite")]
    Lite(sqlx::SqlitePool),
}

/// `$body` with `$p` bound to the pool, whichever dialect it is on.
macro_rules! on_pool {
    ($pool:expr, $p:ident => $body:expr) => {
        match $pool {
            #[cfg(feature = "postgres")]
            Pool::Pg($p) => $body,
            #[cfg(feature = "mysql")]
            Pool::My($p) => $body,
            #[cfg(feature = "sqlite")]
            Pool::Lite($p) => $body,
        }
    };
}

fn unreachable_server(what: &str, url: &str, env: &str, e: impl std::fmt::Display) -> ! {
    panic!(
        "{what} at {} did not answer ({e}): start it (`cargo xtask test` does) or point {env} at a running server",
        lease_sql::redacted_url(url)
    )
}

/// Pool options of at most `max` connections.
fn options<DB: sqlx::Database>(max: u32) -> sqlx::pool::PoolOptions<DB> {
    sqlx::pool::PoolOptions::new()
        .max_connections(max)
        .acquire_timeout(Duration::from_secs(10))
}

impl Pool {
    #[cfg(feature = "postgres")]
    pub async fn postgres(max: u32) -> Self {
        let url = pg_url();
        let pool = options(max).connect(&url).await;
        Self::Pg(pool.unwrap_or_else(|e| {
            unreachable_server("PostgreSQL", &url, "NONONCE_TEST_POSTGRES_URL", e)
        }))
    }

    /// A pool whose sessions run `SET TIME ZONE zone` after connecting (sqlx itself asks for UTC).
    #[cfg(feature = "postgres")]
    pub async fn postgres_in_zone(max: u32, zone: String) -> Self {
        let set = format!("SET TIME ZONE '{zone}'");
        let pool = options(max).after_connect(move |conn, _| {
            let set = set.clone();
            Box::pin(async move {
                sqlx::Executor::execute(conn, AssertSqlSafe(set)).await?;
                Ok(())
            })
        });
        Self::Pg(pool.connect(&pg_url()).await.unwrap())
    }

    #[cfg(feature = "mysql")]
    pub async fn mysql(max: u32) -> Self {
        Self::mysql_with(max, |o| o).await
    }

    #[cfg(feature = "mysql")]
    pub async fn mysql_with(
        max: u32,
        f: impl FnOnce(sqlx::mysql::MySqlConnectOptions) -> sqlx::mysql::MySqlConnectOptions,
    ) -> Self {
        let url = mysql_url();
        let options = f(url.parse().expect("mysql url"));
        let pool = self::options(max).connect_with(options).await;
        Self::My(
            pool.unwrap_or_else(|e| {
                unreachable_server("MariaDB", &url, "NONONCE_TEST_MYSQL_URL", e)
            }),
        )
    }

    #[cfg(feature = "sqlite")]
    pub async fn sqlite(path: &std::path::Path, max: u32) -> Self {
        let pool = sqlx::sqlite::SqlitePoolOptions::new()
            .max_connections(max)
            .connect_with(lease_sql::sqlite_options(path))
            .await
            .expect("open sqlite file");
        Self::Lite(pool)
    }

    pub async fn close(&self) {
        on_pool!(self, p => p.close().await)
    }

    pub fn dialect(&self) -> Dialect {
        match self {
            #[cfg(feature = "postgres")]
            Self::Pg(_) => Dialect::Postgres,
            #[cfg(feature = "mysql")]
            Self::My(_) => Dialect::MySql,
            #[cfg(feature = "sqlite")]
            Self::Lite(_) => Dialect::Sqlite,
        }
    }

    pub fn strategy(&self, table: &str) -> SqlStrategy {
        let s = match self {
            #[cfg(feature = "postgres")]
            Self::Pg(p) => SqlStrategy::postgres(p.clone()),
            #[cfg(feature = "mysql")]
            Self::My(p) => SqlStrategy::mysql(p.clone()),
            #[cfg(feature = "sqlite")]
            Self::Lite(p) => SqlStrategy::sqlite(p.clone()),
        };
        s.with_table(table).unwrap()
    }

    /// Runs a statement, returning the rows affected.
    pub async fn exec(&self, sql: &str) -> u64 {
        self.try_exec(sql)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"))
    }

    /// Runs a statement, returning the rows affected or the error.
    pub async fn try_exec(&self, sql: &str) -> Result<u64, sqlx::Error> {
        let sql = sql.to_owned();
        on_pool!(self, p => sqlx::query(AssertSqlSafe(sql.clone()))
            .execute(p)
            .await
            .map(|r| r.rows_affected()))
    }

    /// One `i64` from a query.
    pub async fn scalar(&self, sql: &str) -> i64 {
        let sql = sql.to_owned();
        let result: Result<i64, sqlx::Error> = on_pool!(self, p => sqlx::query(AssertSqlSafe(sql.clone()))
            .fetch_one(p)
            .await
            .and_then(|r| r.try_get(0)));
        result.unwrap_or_else(|e| panic!("{sql}: {e}"))
    }

    /// The row of `id`: token, lock_version and microseconds until it expires (db clock, UTC).
    pub async fn row(&self, table: &str, id: u16) -> (Option<Vec<u8>>, i64, i64) {
        let sql = match self.dialect() {
            Dialect::Postgres => format!(
                "SELECT token, lock_version::bigint, \
                 (EXTRACT(EPOCH FROM expires_at - (CURRENT_TIMESTAMP AT TIME ZONE 'UTC')) * 1000000)::bigint \
                 FROM {table} WHERE id = {id}"
            ),
            Dialect::MySql => format!(
                "SELECT token, CAST(lock_version AS SIGNED), \
                 TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), expires_at) FROM {table} WHERE id = {id}"
            ),
            _ => format!(
                "SELECT token, lock_version, \
                 CAST((julianday(expires_at) - julianday('now')) * 86400000000.0 AS INTEGER) \
                 FROM {table} WHERE id = {id}"
            ),
        };
        on_pool!(self, p => {
            let r = sqlx::query(AssertSqlSafe(sql)).fetch_one(p).await.unwrap();
            (r.try_get(0).unwrap(), r.try_get(1).unwrap(), r.try_get(2).unwrap())
        })
    }

    /// SQL setting `expires_at` to the db's UTC now plus `seconds` (may be negative).
    pub fn at(&self, seconds: i64) -> String {
        match self.dialect() {
            Dialect::Postgres => {
                format!("((CURRENT_TIMESTAMP AT TIME ZONE 'UTC') + INTERVAL '{seconds} seconds')")
            }
            Dialect::MySql => format!("TIMESTAMPADD(SECOND, {seconds}, UTC_TIMESTAMP(6))"),
            _ => format!("strftime('%Y-%m-%d %H:%M:%f', 'now', '{seconds:+} seconds')"),
        }
    }

    /// Ends the lease on `id` as if it had expired a second ago.
    pub async fn expire(&self, table: &str, id: u16) {
        let at = self.at(-1);
        self.exec(&format!(
            "UPDATE {table} SET expires_at = {at} WHERE id = {id}"
        ))
        .await;
    }

    /// Marks rows `ids` held by nobody we know for an hour.
    pub async fn hold(&self, table: &str, ids: std::ops::RangeInclusive<u16>) {
        let at = self.at(3600);
        self.exec(&format!(
            "UPDATE {table} SET expires_at = {at}, lock_version = lock_version + 1 \
             WHERE id BETWEEN {} AND {}",
            ids.start(),
            ids.end()
        ))
        .await;
    }
}

/// A table of its own on one server, migrated, dropped when the test ends (even on panic).
pub struct TestTable {
    pub pool: Pool,
    pub name: String,
    /// Keeps a SQLite file's directory alive.
    pub dir: Option<TempDir>,
}

impl TestTable {
    pub async fn new(dialect: Dialect) -> Self {
        let t = Self::unmigrated(dialect).await;
        assert_eq!(t.strategy().migrate().await.unwrap(), 512);
        t
    }

    pub async fn unmigrated(dialect: Dialect) -> Self {
        let name = format!("lease_test_{}", suffix());
        // Four connections, as a node's own pool has: PostgreSQL serves 100 by default, to
        // every test process of a run at once (the command's among them), and eight each
        // once left a `nononce leases list` of another test waiting for one in vain.
        let (pool, dir) = match dialect {
            #[cfg(feature = "postgres")]
            Dialect::Postgres => (Pool::postgres(4).await, None),
            #[cfg(feature = "mysql")]
            Dialect::MySql => (Pool::mysql(4).await, None),
            #[cfg(feature = "sqlite")]
            Dialect::Sqlite => {
                let dir = TempDir::new();
                (
                    Pool::sqlite(&dir.path.join("leases.db"), 8).await,
                    Some(dir),
                )
            }
            other => panic!("lease-sql is built without the {other} feature"),
        };
        Self { pool, name, dir }
    }

    pub fn strategy(&self) -> SqlStrategy {
        self.pool.strategy(&self.name)
    }

    /// Runs `sql`, in which `{t}` stands for the table.
    pub async fn exec(&self, sql: &str) -> u64 {
        self.pool.exec(&sql.replace("{t}", &self.name)).await
    }

    /// How many of the table's rows match `condition`.
    pub async fn count(&self, condition: &str) -> i64 {
        let sql = format!("SELECT COUNT(*) FROM {} WHERE {condition}", self.name);
        self.pool.scalar(&sql).await
    }

    /// The floor of `id`.
    pub async fn floor(&self, id: u16) -> u64 {
        let sql = format!("SELECT floor_ms FROM {} WHERE id = {id}", self.name);
        u64::try_from(self.pool.scalar(&sql).await).unwrap()
    }
}

impl Drop for TestTable {
    fn drop(&mut self) {
        // A SQLite table's directory goes with it; a server's table is dropped.
        #[cfg(any(feature = "postgres", feature = "mysql"))]
        if self.dir.is_none() {
            drop_table(self.pool.dialect(), &self.name);
        }
    }
}

/// Drops `table` on `dialect`'s shared server, and its coordinator record.
#[cfg(any(feature = "postgres", feature = "mysql"))]
pub fn drop_table(dialect: Dialect, table: &str) {
    let sql = format!("DROP TABLE IF EXISTS {table}");
    let forget = format!(
        "DELETE FROM {} WHERE lease_table = '{table}'",
        lease_sql::COORDINATOR_TABLE
    );
    // Drop from a thread with its own runtime and connection: this may run inside (or after)
    // the test's runtime.
    let result = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let pool = match dialect {
                #[cfg(feature = "postgres")]
                Dialect::Postgres => Pool::postgres(1).await,
                #[cfg(feature = "mysql")]
                Dialect::MySql => Pool::mysql(1).await,
                other => unreachable!("a {other} table lives in a directory of its own"),
            };
            pool.exec(&sql).await;
            // The coordinator table exists once any migration ran.
            let _ = pool.try_exec(&forget).await;
        });
    })
    .join();
    if result.is_err() && !std::thread::panicking() {
        panic!("could not drop test table {table}");
    }
}

/// A temporary directory, removed on drop.
pub struct TempDir {
    pub path: std::path::PathBuf,
}

impl TempDir {
    pub fn new() -> Self {
        let path = std::env::temp_dir().join(format!("lease-sql-test-{}", suffix()));
        std::fs::create_dir_all(&path).unwrap();
        Self { path }
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

/// Generates one `#[tokio::test]` per dialect for each `async fn name(Dialect)` listed, in a
/// module per dialect that is compiled with the dialect's feature; those listed after
/// `; servers:` on PostgreSQL and MariaDB only.
#[macro_export]
macro_rules! per_dialect {
    ($($name:ident),* $(,)? $(; servers: $($server:ident),* $(,)?)?) => {
        $crate::dialect_tests!(postgres, "postgres", Postgres: $($name,)* $($($server,)*)?);
        $crate::dialect_tests!(mysql, "mysql", MySql: $($name,)* $($($server,)*)?);
        $crate::dialect_tests!(sqlite, "sqlite", Sqlite: $($name,)*);
    };
}

/// The module of [`per_dialect!`]'s tests on one dialect.
#[macro_export]
macro_rules! dialect_tests {
    ($module:ident, $feature:literal, $dialect:ident: $($name:ident,)*) => {
        #[cfg(feature = $feature)]
        mod $module {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name(lease_sql::Dialect::$dialect).await;
                }
            )*
        }
    };
}
