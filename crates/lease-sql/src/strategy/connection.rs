//! [`Connection`]: the production transport, a sqlx pool and its dialect's statements.

use std::time::Duration;

use super::amount::Amount;
use super::backend::{Backend, execute};
use super::lease::{new_token, row_id, signed};
use crate::table::{DEFAULT_TABLE, TableName};
use crate::transport::{Reply, Request, Settings, Transport};
use crate::{AmnesiaGuard, Dialect, SqlLeaseError};

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

/// The production transport: a sqlx pool (PostgreSQL, MySQL/MariaDB or SQLite) with its
/// dialect's statements for the strategy's settings, and how free rows are claimed.
#[derive(Clone)]
pub struct Connection {
    pub(super) backend: Backend,
    pub(super) acquisition: Acquisition,
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connection")
            .field("dialect", &self.backend.dialect())
            .field("acquisition", &self.acquisition)
            .finish_non_exhaustive()
    }
}

impl Connection {
    /// A connection on `pool`, with the statements `backend` builds for the default table
    /// (the strategy gives it its settings at once).
    pub(super) fn new<P>(backend: fn(P, &Settings) -> Backend, pool: P) -> Self {
        let settings = Settings {
            table: TableName::new(DEFAULT_TABLE).unwrap_or_else(|_| unreachable!()),
            amnesia_guard: AmnesiaGuard::default(),
            hold_off: Duration::ZERO,
        };
        Self {
            backend: backend(pool, &settings),
            acquisition: Acquisition::default(),
        }
    }

    /// A duration as this database applies it.
    fn amount(&self, duration: Duration) -> Result<Amount, sqlx::Error> {
        Amount::new(duration, self.backend.dialect())
            .map_err(|e| sqlx::Error::Protocol(e.to_string()))
    }

    async fn send(&self, request: Request) -> Result<Reply, sqlx::Error> {
        let (backend, common) = (&self.backend, self.backend.common());
        let done = |_| Reply::Done;
        let renew = matches!(request, Request::Renew { .. });
        match request {
            Request::Claim {
                token,
                amount,
                floor_ms,
                now_ms,
            } => {
                let amount = self.amount(amount)?;
                self.claim(&token, &amount, signed(now_ms), signed(floor_ms))
                    .await
                    .map(Reply::Claim)
            }
            Request::CountFree => self.count_free().await.map(Reply::Free),
            Request::Restore => execute!(backend, common.restore.sql()).map(done),
            Request::Renew {
                id,
                token,
                amount,
                floor_ms,
            }
            | Request::Release {
                id,
                token,
                guard: amount,
                floor_ms,
            } => {
                let amount = self.amount(amount)?;
                self.update_own(renew, id, &token, &amount, signed(floor_ms))
                    .await
            }
            Request::RaiseFloor { id, floor_ms } => {
                let sql = common.raise_floor.sql();
                execute!(backend, sql, signed(floor_ms), row_id(id)).map(done)
            }
            guard => self.guard(guard).await,
        }
    }
}

impl Transport for Connection {
    async fn exchange(&self, request: Request) -> Result<Reply, sqlx::Error> {
        match self.send(request).await {
            Ok(reply) => Ok(reply),
            Err(error) => Err(self.cause(error).await),
        }
    }

    fn dialect(&self) -> Dialect {
        self.backend.dialect()
    }

    fn configure(&mut self, settings: &Settings) {
        self.backend = self.backend.rebuilt(settings);
    }

    fn token(&self) -> Result<[u8; 16], SqlLeaseError> {
        new_token()
    }
}
