//! Errors as the strategy reports them: named after the table they concern, and a pool timeout
//! explained by what one direct connection runs into.

use std::time::Duration;

use super::SqlStrategy;
use super::backend::on_pool;
use crate::SqlLeaseError;
use crate::table::COORDINATOR_TABLE;

/// How long [`SqlStrategy::explain`] waits for its one direct connection.
const DIRECT_CONNECT_TIMEOUT: Duration = Duration::from_secs(3);

impl SqlStrategy {
    /// As [`error`](Self::error); and when the pool gave up waiting for a connection, which
    /// sqlx reports without a cause, one direct connection finds the cause (refused, unknown
    /// host, credentials, TLS) and the error is classified by that.
    async fn explain(&self, error: sqlx::Error) -> SqlLeaseError {
        if matches!(error, sqlx::Error::PoolTimedOut)
            && let Some(cause) = self.direct_connection_error().await
        {
            return self.error(cause);
        }
        self.error(error)
    }

    /// `Ok` of an operation, or its error [explained](Self::explain).
    pub(super) async fn checked<T>(
        &self,
        result: Result<T, sqlx::Error>,
    ) -> Result<T, SqlLeaseError> {
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
            let connected: Result<(), sqlx::Error> = on_pool!(&self.backend, |pool| pool
                .connect_options()
                .connect()
                .await?
                .close()
                .await);
            connected
        };
        tokio::time::timeout(DIRECT_CONNECT_TIMEOUT, attempt)
            .await
            .ok()?
            .err()
    }

    /// `error` as a [`SqlLeaseError`] naming the table it concerns.
    pub(super) fn error(&self, error: sqlx::Error) -> SqlLeaseError {
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
        SqlLeaseError::from_sqlx(error, table.as_str(), self.dialect())
    }
}
