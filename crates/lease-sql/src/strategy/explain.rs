//! Errors as the strategy reports them: named after the table they concern, and a pool timeout
//! explained by what one direct connection runs into.

use std::time::Duration;

use super::backend::on_pool;
use super::{Connection, SqlStrategy};
use crate::SqlLeaseError;
use crate::table::COORDINATOR_TABLE;
use crate::transport::{Reply, Request, Transport};

/// How long [`Connection::cause`] waits for its one direct connection.
const DIRECT_CONNECT_TIMEOUT: Duration = Duration::from_secs(3);

/// Sends `request` and takes its answer out of the reply that matches `pattern`; a reply of
/// another kind is an error naming the request.
macro_rules! ask {
    ($strategy:expr, $request:expr, $pattern:pat => $answer:expr) => {{
        let request = $request;
        let name = request.name();
        match $strategy.exchange(request).await? {
            $pattern => $answer,
            other => return Err($crate::strategy::explain::unexpected(name, &other)),
        }
    }};
}
pub(super) use ask;

/// The error for a reply of the wrong kind to `request` (a [`Request::name`]).
pub(super) fn unexpected(request: &'static str, reply: &Reply) -> SqlLeaseError {
    SqlLeaseError::Database(sqlx::Error::Protocol(format!(
        "unexpected answer to {request}: {reply:?}"
    )))
}

impl<T: Transport> SqlStrategy<T> {
    /// One step of the protocol, its error named after the table it concerns.
    pub(super) async fn exchange(&self, request: Request) -> Result<Reply, SqlLeaseError> {
        self.transport
            .exchange(request)
            .await
            .map_err(|e| self.error(e))
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

impl SqlStrategy<Connection> {
    /// `Ok` of an operation, or its error with [its cause](Connection::cause), named after the
    /// table it concerns.
    pub(super) async fn checked<V>(
        &self,
        result: Result<V, sqlx::Error>,
    ) -> Result<V, SqlLeaseError> {
        match result {
            Ok(value) => Ok(value),
            Err(error) => Err(self.error(self.transport.cause(error).await)),
        }
    }
}

impl Connection {
    /// `error`; or, when the pool gave up waiting for a connection, which sqlx reports without
    /// a cause, what one direct connection runs into (refused, unknown host, credentials, TLS).
    pub(super) async fn cause(&self, error: sqlx::Error) -> sqlx::Error {
        if matches!(error, sqlx::Error::PoolTimedOut)
            && let Some(cause) = self.direct_connection_error().await
        {
            return cause;
        }
        error
    }

    /// Why one connection with the pool's settings fails, or `None` when it opens (the pool
    /// was only busy) or does not answer within [`DIRECT_CONNECT_TIMEOUT`].
    async fn direct_connection_error(&self) -> Option<sqlx::Error> {
        tokio::time::timeout(DIRECT_CONNECT_TIMEOUT, self.connect_once())
            .await
            .ok()?
            .err()
    }

    /// Opens one connection with the pool's settings, outside the pool, and closes it.
    pub(crate) async fn connect_once(&self) -> Result<(), sqlx::Error> {
        use sqlx::{ConnectOptions, Connection as _};
        on_pool!(&self.backend, |pool| pool
            .connect_options()
            .connect()
            .await?
            .close()
            .await)
    }
}
