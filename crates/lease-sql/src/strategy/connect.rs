//! Building a strategy: on a pool of the caller's, or on a lazy pool of its own for a URL.

use std::time::Duration;

use super::backend::Backend;
use super::{Connection, SqlStrategy};
use crate::{Dialect, SqlLeaseError};

/// A small pool for one node's lease traffic.
fn pool_options<DB: sqlx::Database>() -> sqlx::pool::PoolOptions<DB> {
    sqlx::pool::PoolOptions::new()
        .max_connections(4)
        .acquire_timeout(Duration::from_secs(5))
}

impl SqlStrategy<Connection> {
    /// Leases in table `no_noncense_leases` of a PostgreSQL database.
    #[cfg(feature = "postgres")]
    #[must_use]
    pub fn postgres(pool: sqlx::PgPool) -> Self {
        Self::with_transport(Connection::new(Backend::postgres, pool))
    }

    /// Leases in table `no_noncense_leases` of a MySQL or MariaDB database.
    #[cfg(feature = "mysql")]
    #[must_use]
    pub fn mysql(pool: sqlx::MySqlPool) -> Self {
        Self::with_transport(Connection::new(Backend::mysql, pool))
    }

    /// Leases in table `no_noncense_leases` of a SQLite database; open the pool with
    /// [`sqlite_options`](crate::sqlite_options) (file, WAL, busy timeout).
    #[cfg(feature = "sqlite")]
    #[must_use]
    pub fn sqlite(pool: sqlx::SqlitePool) -> Self {
        Self::with_transport(Connection::new(Backend::sqlite, pool))
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
    /// [`SqlLeaseError::UnsupportedUrl`] for an unknown scheme or a dialect whose feature is off,
    /// [`SqlLeaseError::UnknownUrlOption`] naming an option nobody reads,
    /// [`SqlLeaseError::InvalidOption`] for a bad option value, [`SqlLeaseError::InvalidTableName`], and
    /// [`SqlLeaseError::Connection`] for a URL that does not parse.
    pub fn connect_lazy(url: &str) -> Result<Self, SqlLeaseError> {
        let scheme = url.split(':').next().unwrap_or_default();
        match scheme {
            #[cfg(feature = "postgres")]
            "postgres" | "postgresql" => {
                let (url, options) = crate::url::split(url, Dialect::Postgres)?;
                let connect: sqlx::postgres::PgConnectOptions =
                    url.parse().map_err(SqlLeaseError::Connection)?;
                Self::postgres(pool_options().connect_lazy_with(connect)).with_url_options(options)
            }
            #[cfg(feature = "mysql")]
            "mysql" | "mariadb" => {
                let (url, options) = crate::url::split(url, Dialect::MySql)?;
                let url = url.replacen("mariadb:", "mysql:", 1);
                let connect: sqlx::mysql::MySqlConnectOptions =
                    url.parse().map_err(SqlLeaseError::Connection)?;
                Self::mysql(pool_options().connect_lazy_with(connect)).with_url_options(options)
            }
            #[cfg(feature = "sqlite")]
            "sqlite" => {
                let (url, options) = crate::url::split(url, Dialect::Sqlite)?;
                let connect: sqlx::sqlite::SqliteConnectOptions =
                    url.parse().map_err(SqlLeaseError::Connection)?;
                Self::sqlite(pool_options().connect_lazy_with(crate::configure_sqlite(connect)))
                    .with_url_options(options)
            }
            _ => Err(SqlLeaseError::UnsupportedUrl(crate::url::redacted_url(url))),
        }
    }

    /// Applies the options split off a URL, through the same checks as the `with_*` calls.
    fn with_url_options(mut self, options: crate::url::UrlOptions) -> Result<Self, SqlLeaseError> {
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
}
