//! The pool a strategy talks to, with its dialect's statements for the strategy's settings.

use std::sync::Arc;

#[cfg(feature = "sqlite")]
use super::amount::Amount;
use crate::Dialect;
#[cfg(any(feature = "postgres", feature = "mysql"))]
use crate::queries::AmnesiaQueries;
use crate::queries::Common;
#[cfg(feature = "mysql")]
use crate::queries::MySqlQueries;
#[cfg(feature = "postgres")]
use crate::queries::PostgresQueries;
#[cfg(feature = "sqlite")]
use crate::queries::SqliteQueries;
use crate::transport::Settings;

/// One pool and the statements of its dialect: a statement is only at hand on the dialect that
/// has it.
#[derive(Clone)]
pub(super) enum Backend {
    #[cfg(feature = "postgres")]
    Postgres(sqlx::PgPool, Arc<PostgresQueries>),
    #[cfg(feature = "mysql")]
    MySql(sqlx::MySqlPool, Arc<MySqlQueries>),
    #[cfg(feature = "sqlite")]
    Sqlite(sqlx::SqlitePool, Arc<SqliteQueries>),
    /// Keeps every match over the backends valid when no dialect feature is enabled (an enum
    /// without variants cannot be matched through a reference).
    #[expect(dead_code, reason = "only ever matched, never built")]
    Never(core::convert::Infallible),
}

/// Runs the same sqlx code on whichever pool the strategy holds, with its statements if asked
/// for: the pools differ only in type.
macro_rules! on_pool {
    ($backend:expr, |$pool:pat_param, $queries:pat_param| $body:expr) => {
        match $backend {
            #[cfg(feature = "postgres")]
            $crate::strategy::backend::Backend::Postgres($pool, $queries) => $body,
            #[cfg(feature = "mysql")]
            $crate::strategy::backend::Backend::MySql($pool, $queries) => $body,
            #[cfg(feature = "sqlite")]
            $crate::strategy::backend::Backend::Sqlite($pool, $queries) => $body,
            $crate::strategy::backend::Backend::Never(never) => match *never {},
        }
    };
    ($backend:expr, |$pool:pat_param| $body:expr) => {
        $crate::strategy::backend::on_pool!($backend, |$pool, _| $body)
    };
}
pub(super) use on_pool;

/// Runs statement `sql` with the parameters `binds` on whichever pool the strategy holds, and
/// answers how many rows it changed.
macro_rules! execute {
    ($backend:expr, $sql:expr $(, $bind:expr)* $(,)?) => {{
        let changed: Result<u64, sqlx::Error> =
            $crate::strategy::backend::on_pool!($backend, |pool| sqlx::query($sql)
                $(.bind($bind))*
                .execute(pool)
                .await
                .map(|done| done.rows_affected()));
        changed
    }};
}
pub(super) use execute;

impl Backend {
    /// A PostgreSQL pool with the statements for `settings`.
    #[cfg(feature = "postgres")]
    pub(super) fn postgres(pool: sqlx::PgPool, s: &Settings) -> Self {
        Self::Postgres(
            pool,
            Arc::new(PostgresQueries::new(&s.table, s.amnesia_guard, s.hold_off)),
        )
    }

    /// A MySQL/MariaDB pool with the statements for `settings`.
    #[cfg(feature = "mysql")]
    pub(super) fn mysql(pool: sqlx::MySqlPool, s: &Settings) -> Self {
        Self::MySql(
            pool,
            Arc::new(MySqlQueries::new(&s.table, s.amnesia_guard, s.hold_off)),
        )
    }

    /// A SQLite pool with the statements for `settings`: SQLite has no replicas, so only the
    /// hold-off for deleted rows applies.
    #[cfg(feature = "sqlite")]
    pub(super) fn sqlite(pool: sqlx::SqlitePool, s: &Settings) -> Self {
        // The hold-off is validated within the longest duration, so it always converts.
        let hold_off = Amount::new(s.hold_off, Dialect::Sqlite)
            .map_or_else(|_| String::new(), |a| a.modifier());
        Self::Sqlite(pool, Arc::new(SqliteQueries::new(&s.table, &hold_off)))
    }

    /// The same pool with the statements for new settings.
    pub(super) fn rebuilt(&self, settings: &Settings) -> Self {
        match self {
            #[cfg(feature = "postgres")]
            Self::Postgres(pool, _) => Self::postgres(pool.clone(), settings),
            #[cfg(feature = "mysql")]
            Self::MySql(pool, _) => Self::mysql(pool.clone(), settings),
            #[cfg(feature = "sqlite")]
            Self::Sqlite(pool, _) => Self::sqlite(pool.clone(), settings),
            Self::Never(never) => match *never {},
        }
    }

    pub(super) fn dialect(&self) -> Dialect {
        match self {
            #[cfg(feature = "postgres")]
            Self::Postgres(..) => Dialect::Postgres,
            #[cfg(feature = "mysql")]
            Self::MySql(..) => Dialect::MySql,
            #[cfg(feature = "sqlite")]
            Self::Sqlite(..) => Dialect::Sqlite,
            Self::Never(never) => match *never {},
        }
    }

    /// The statements every dialect has.
    pub(super) fn common(&self) -> &Common {
        on_pool!(self, |_, queries| &queries.common)
    }

    /// The amnesia guard's statements, on the dialects that have the guard.
    #[cfg(any(feature = "postgres", feature = "mysql"))]
    pub(super) fn amnesia(&self) -> Option<&AmnesiaQueries> {
        match self {
            #[cfg(feature = "postgres")]
            Self::Postgres(_, queries) => Some(&queries.amnesia),
            #[cfg(feature = "mysql")]
            Self::MySql(_, queries) => Some(&queries.amnesia),
            #[cfg(feature = "sqlite")]
            Self::Sqlite(..) => None,
            Self::Never(never) => match *never {},
        }
    }
}
