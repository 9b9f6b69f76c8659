//! Acquisition: claiming a free row on each dialect, in the way [`Acquisition`] chooses.

use lease_core::{Acquire, Grant};
use sqlx::Row;

use super::amount::Amount;
use super::backend::Backend;
#[cfg(any(feature = "postgres", feature = "mysql"))]
use super::connection::Acquisition;
use super::explain::unexpected;
use super::lease::{SqlLease, machine_id, unsigned};
use super::{Connection, SqlStrategy};
use crate::SqlLeaseError;
use crate::transport::{Claim, Reply, Request, Transport};

/// A won claim, from the row's columns: its ID, the floor stored before the claim, and the
/// database clock (Unix ms) when it applied the claim.
#[cfg_attr(
    not(any(feature = "postgres", feature = "mysql", feature = "sqlite")),
    expect(dead_code, reason = "only a dialect claims rows")
)]
fn won(id: i64, floor: i64, coordinator_ms: i64) -> Result<Claim, sqlx::Error> {
    Ok(Claim::Won {
        id: machine_id(id)?,
        floor_ms: unsigned(floor),
        coordinator_ms: unsigned(coordinator_ms),
    })
}

/// A pooled connection that is closed, not returned to the pool, unless the transaction this
/// code opened on it by hand was ended: also when the future is dropped half-way.
#[cfg(any(feature = "mysql", feature = "sqlite"))]
struct CloseUnlessEnded<'a, DB: sqlx::Database> {
    conn: &'a mut sqlx::pool::PoolConnection<DB>,
    ended: bool,
}

#[cfg(any(feature = "mysql", feature = "sqlite"))]
impl<DB: sqlx::Database> Drop for CloseUnlessEnded<'_, DB> {
    fn drop(&mut self) {
        if !self.ended {
            // Closing the session makes the server roll the transaction back.
            self.conn.close_on_drop();
        }
    }
}

impl<T: Transport> SqlStrategy<T> {
    /// Claims a free row for the requested duration (shortened to the longest lease),
    /// preferring one whose floor is below the request's `now_ms`, and raises its floor to at
    /// least the request's `floor_ms`.
    pub(super) async fn claim_lease(
        &self,
        request: Acquire,
    ) -> Result<Grant<SqlLease>, SqlLeaseError> {
        let amount = self.lease_amount(request.requested)?;
        let token = self.transport.token()?;
        let claim = Request::Claim {
            token,
            amount: amount.applied,
            floor_ms: request.floor_ms,
            now_ms: request.now_ms,
        };
        // A second attempt only after a table without a record was recorded as trusted.
        for _ in 0..2 {
            match self.exchange(claim.clone()).await? {
                Reply::Claim(Claim::Won {
                    id,
                    floor_ms,
                    coordinator_ms,
                }) => {
                    let grant = Grant::new(id, SqlLease::from_parts(id, token), amount.applied)
                        .with_floor(floor_ms)
                        .with_coordinator_ms(coordinator_ms);
                    return Ok(if self.guarded() {
                        grant.with_max_clock_offset(self.max_clock_offset)
                    } else {
                        grant
                    });
                }
                Reply::Claim(Claim::Nothing { tried }) => self.nothing_claimed(tried).await?,
                other => return Err(unexpected(claim.name(), &other)),
            }
        }
        Err(SqlLeaseError::Conflict { candidates: 0 })
    }
}

impl Connection {
    /// One claim attempt: the preferred free row (floor below `now_ms`), guarded by the
    /// server's identity when the amnesia guard is on.
    pub(super) async fn claim(
        &self,
        token: &[u8; 16],
        amount: &Amount,
        now_ms: i64,
        floor: i64,
    ) -> Result<Claim, sqlx::Error> {
        match (&self.backend, self.acquisition) {
            #[cfg(feature = "postgres")]
            (Backend::Postgres(pool, q), Acquisition::SkipLocked) => {
                let row = sqlx::query(q.claim_preferred.sql())
                    .bind(&token[..])
                    .bind(amount.micros())
                    .bind(floor)
                    .bind(now_ms)
                    .fetch_optional(pool)
                    .await?;
                match row {
                    Some(row) => won(row.try_get(0)?, row.try_get(1)?, row.try_get(2)?),
                    None => Ok(Claim::Nothing { tried: 0 }),
                }
            }
            #[cfg(feature = "postgres")]
            (Backend::Postgres(pool, q), Acquisition::Optimistic { candidates }) => {
                let rows = sqlx::query(q.candidates.sql())
                    .bind(now_ms)
                    .bind(i64::from(candidates))
                    .fetch_all(pool)
                    .await?;
                for row in &rows {
                    let (id, version, before): (i64, i64, i64) =
                        (row.try_get(0)?, row.try_get(1)?, row.try_get(2)?);
                    let claimed = sqlx::query(q.claim_version.sql())
                        .bind(&token[..])
                        .bind(amount.micros())
                        .bind(floor)
                        .bind(i16::try_from(id).unwrap_or(-1))
                        .bind(i32::try_from(version).unwrap_or(-1))
                        .fetch_optional(pool)
                        .await?;
                    if let Some(claimed) = claimed {
                        return won(id, before, claimed.try_get(0)?);
                    }
                }
                Ok(Claim::Nothing { tried: rows.len() })
            }
            // Two round trips: isolation level, `START TRANSACTION` and the locking read (with
            // the guard) in one; the claim and `COMMIT` in the other. Multi-statement text, so
            // the values are spliced in: integers and the token as hex.
            #[cfg(feature = "mysql")]
            (Backend::MySql(pool, q), Acquisition::SkipLocked) => {
                let mut conn = pool.acquire().await?;
                let mut open = CloseUnlessEnded {
                    conn: &mut conn,
                    ended: false,
                };
                let mut rows = sqlx::raw_sql(q.begin_and_lock_free_row(now_ms))
                    .fetch_all(&mut **open.conn)
                    .await?;
                // No free row below our clock: the lowest free row, whatever its floor.
                if rows.is_empty() {
                    rows = sqlx::raw_sql(q.lock_free_row(None))
                        .fetch_all(&mut **open.conn)
                        .await?;
                }
                let Some(row) = rows.first() else {
                    sqlx::raw_sql("ROLLBACK").execute(&mut **open.conn).await?;
                    open.ended = true;
                    return Ok(Claim::Nothing { tried: 0 });
                };
                let (id, version, before, clock): (i64, i64, i64, i64) = (
                    row.try_get(0)?,
                    row.try_get(1)?,
                    row.try_get(2)?,
                    row.try_get(3)?,
                );
                let micros = amount.micros().to_string();
                let claim = q
                    .claim_batch
                    .fill(token, &micros, floor, now_ms, (id, version));
                let done = sqlx::raw_sql(claim).execute(&mut **open.conn).await?;
                open.ended = true;
                if done.rows_affected() == 1 {
                    won(id, before, clock)
                } else {
                    Ok(Claim::Nothing { tried: 1 })
                }
            }
            #[cfg(feature = "mysql")]
            (Backend::MySql(pool, q), Acquisition::Optimistic { candidates }) => {
                // Read and claims on one connection: the guard in the read then vouches for
                // the server the claims reach (a failover breaks the connection).
                let mut conn = pool.acquire().await?;
                let rows = sqlx::query(q.candidates.sql())
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
                    let done = sqlx::query(q.claim_version.sql())
                        .bind(&token[..])
                        .bind(amount.micros())
                        .bind(floor)
                        .bind(id)
                        .bind(version)
                        .execute(&mut *conn)
                        .await?;
                    if done.rows_affected() == 1 {
                        let clock = i64::try_from(done.last_insert_id()).unwrap_or(read_at);
                        return won(id, before, clock);
                    }
                }
                Ok(Claim::Nothing { tried: rows.len() })
            }
            #[cfg(feature = "sqlite")]
            (Backend::Sqlite(pool, q), _) => {
                // One round trip to the connection's thread: the write lock is held briefly.
                let mut conn = pool.acquire().await?;
                let mut open = CloseUnlessEnded {
                    conn: &mut conn,
                    ended: false,
                };
                let batch = q
                    .claim_batch
                    .fill(token, &amount.modifier(), floor, now_ms, (0, 0));
                let rows = sqlx::raw_sql(batch).fetch_all(&mut **open.conn).await?;
                open.ended = true;
                match rows.first() {
                    Some(row) => won(row.try_get(0)?, row.try_get(1)?, row.try_get(2)?),
                    None => Ok(Claim::Nothing { tried: 0 }),
                }
            }
            (Backend::Never(never), _) => match *never {},
        }
    }
}
