//! The integration tests of the facade, in one binary.
//!
//! Each module is a file of `tests/`; `cargo test -p nononce --test integration MODULE::` runs
//! one of them.

mod builder;
// nonce-core's sqlx column types, on PostgreSQL and MariaDB too: here, where sqlx and tokio are
// built for the lease stores anyway, not in nonce-core's tests, which every feature check, the
// loom build and the no_std proof build alone.
#[cfg(any(
    feature = "sqlx-postgres",
    feature = "sqlx-mysql",
    feature = "sqlx-sqlite"
))]
mod columns;
mod guard;
mod keys;
#[cfg(feature = "generation-metrics")]
mod metrics;
mod threads;
