//! [`SqlStrategy::migrate`]: the shipped migration run with the strategy's table name.

use sqlx::{AssertSqlSafe, Row};

use super::backend::Backend;
use super::{Connection, SqlStrategy};
use crate::queries::Statement;
use crate::{AmnesiaGuard, SqlLeaseError};

impl SqlStrategy<Connection> {
    /// Creates the lease table if it does not exist, adds the `floor_ms` column to a table made
    /// before it existed, and adds whichever of the 512 rows are missing; returns how many rows
    /// it added (0 when everything was there). On PostgreSQL and MySQL/MariaDB it also creates
    /// the coordinator table and, if the lease table has no entry there yet, records the
    /// current server as the one that granted its leases.
    ///
    /// A new table is seeded free: usable at once. Rows missing from a table that was seeded
    /// before (deleted by `TRUNCATE` or `DELETE` while nodes may still hold their IDs) come back
    /// blocked for the [amnesia hold-off](Self::amnesia_hold_off), with the amnesia guard on
    /// (the default): so running it at every node's start, or after such a loss, never frees
    /// an ID that a running node holds. With [`AmnesiaGuard::Off`] they come back free.
    ///
    /// Idempotent and safe to run from several nodes at once (PostgreSQL and MySQL serialize it
    /// with an advisory lock, SQLite with a write transaction). It runs the statements of
    /// [`migration_sql`](crate::migration_sql) with this strategy's table name (and, on SQLite,
    /// adds `floor_ms` after checking `PRAGMA table_info`).
    ///
    /// # Errors
    /// [`SqlLeaseError::PermissionDenied`] when the user may not create the table,
    /// [`SqlLeaseError::WrongSchema`] when a table of that name exists with other columns, and the
    /// connection errors of any operation.
    pub async fn migrate(&self) -> Result<u64, SqlLeaseError> {
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
        let added = |before: i64, after: i64| u64::try_from(after - before).unwrap_or(0);
        let seed = format!("INSERT INTO {t} (id, token, expires_at, lock_version)");
        // Rows missing from a table seeded before come back blocked, not free: they may have
        // been deleted while their holders run (see "Deleted rows" in the crate docs).
        let restore = (self.amnesia_guard == AmnesiaGuard::HoldOff)
            .then_some(&self.transport.backend.common().restore);
        // The same steps on each dialect's connection or transaction; `$columns` is the
        // statement that lists the table's columns where `floor_ms` is added by hand (SQLite),
        // `$restore` the statement that puts missing rows back blocked, if it applies.
        macro_rules! migrate_on {
            ($conn:expr, $columns:expr, $restore:expr) => {{
                let columns: Option<&Statement> = $columns;
                let restore: Option<&Statement> = $restore;
                let mut before = 0;
                for statement in statements {
                    if let Some(restore) = restore.filter(|_| statement.contains(&seed)) {
                        sqlx::query(restore.sql()).execute($conn).await?;
                    }
                    sqlx::raw_sql(AssertSqlSafe(statement.as_str()))
                        .execute($conn)
                        .await?;
                    if statement.starts_with(&create) {
                        before = sqlx::query(probe()).fetch_one($conn).await?.try_get(0)?;
                        if let Some(columns) = columns {
                            let names: Vec<String> = sqlx::query(columns.sql())
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
        match &self.transport.backend {
            #[cfg(feature = "postgres")]
            Backend::Postgres(pool, _) => {
                let mut tx = pool.begin().await?;
                // Serializes concurrent migrations (CREATE TABLE IF NOT EXISTS can race): of the
                // coordinator table, shared by every lease table of the schema, then of ours.
                for name in [self.table.coordinator(), self.table.clone()] {
                    sqlx::query("SELECT pg_advisory_xact_lock(hashtext($1))")
                        .bind(format!("nononce:{}", name.as_str()))
                        .execute(&mut *tx)
                        .await?;
                }
                let added = migrate_on!(&mut *tx, None, restore)?;
                tx.commit().await?;
                Ok(added)
            }
            #[cfg(feature = "mysql")]
            Backend::MySql(pool, _) => {
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
                let result = async { migrate_on!(&mut *conn, None, restore) }.await;
                sqlx::query("SELECT RELEASE_LOCK(?)")
                    .bind(&lock)
                    .execute(&mut *conn)
                    .await?;
                result
            }
            #[cfg(feature = "sqlite")]
            Backend::Sqlite(pool, queries) => {
                let mut tx = pool.begin_with("BEGIN IMMEDIATE").await?;
                // A table that exists was seeded: SQLite creates and seeds it in this one
                // transaction. One made here is seeded free.
                let existed = !sqlx::query(queries.columns.sql())
                    .fetch_all(&mut *tx)
                    .await?
                    .is_empty();
                let restore = restore.filter(|_| existed);
                let added = migrate_on!(&mut *tx, Some(&queries.columns), restore)?;
                tx.commit().await?;
                Ok(added)
            }
            Backend::Never(never) => match *never {},
        }
    }
}
