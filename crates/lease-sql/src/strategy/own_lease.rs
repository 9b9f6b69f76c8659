//! Renewal and release: the writes to a lease row that we hold, matched by ID and token.

use lease_core::{MachineId, Release, Renew, Renewal};
#[cfg(any(feature = "postgres", feature = "sqlite"))]
use sqlx::Row;

use super::amount::Amount;
use super::backend::Backend;
use super::explain::ask;
use super::lease::{SqlLease, row_id, unsigned};
use super::{Connection, SqlStrategy};
use crate::SqlLeaseError;
use crate::transport::{Reply, Request, Transport};

impl<T: Transport> SqlStrategy<T> {
    /// Extends `lease` to the requested duration (shortened to the longest lease) and raises
    /// its floor to at least the request's.
    pub(super) async fn renew_own(
        &self,
        lease: &SqlLease,
        request: Renew,
    ) -> Result<Renewal<SqlLease>, SqlLeaseError> {
        let amount = self.lease_amount(request.requested)?;
        let renew = Request::Renew {
            id: lease.machine_id(),
            token: lease.token(),
            amount: amount.applied,
            floor_ms: request.floor_ms,
        };
        let reply = ask!(self, renew, Reply::Matched { ours, clock_ms } => (ours, clock_ms));
        let (true, clock_ms) = reply else {
            return Err(SqlLeaseError::Lost {
                machine_id: lease.machine_id(),
            });
        };
        let renewal = Renewal::new(*lease, amount.applied);
        Ok(match clock_ms {
            Some(ms) if self.guarded() => renewal
                .with_coordinator_ms(ms)
                .with_max_clock_offset(self.max_clock_offset),
            Some(ms) => renewal.with_coordinator_ms(ms),
            None => renewal,
        })
    }

    /// Releases `lease`, keeping the ID blocked for the request's guard and setting the row's
    /// floor to the request's; when the row is no longer ours, its floor is only raised to it.
    /// The token is cleared, so a renewal that arrives later is lost.
    pub(super) async fn release_own(
        &self,
        lease: &SqlLease,
        request: Release,
    ) -> Result<(), SqlLeaseError> {
        let guard = Amount::new(request.guard, self.dialect())?;
        // A row that no longer carries our token is someone else's: the release leaves it alone.
        let release = Request::Release {
            id: lease.machine_id(),
            token: lease.token(),
            guard: guard.applied,
            floor_ms: request.floor_ms,
        };
        if !ask!(self, release, Reply::Matched { ours, .. } => ours) {
            // Not ours any more (expired, taken over, or forgotten by a database that lost
            // writes): only raise the floor, so what was issued under the lease is known.
            self.exchange(Request::RaiseFloor {
                id: lease.machine_id(),
                floor_ms: request.floor_ms,
            })
            .await?;
        }
        Ok(())
    }
}

impl Connection {
    /// Runs the renew (`renew`) or release statement, matched by the row's ID and token.
    pub(super) async fn update_own(
        &self,
        renew: bool,
        id: MachineId,
        token: &[u8; 16],
        amount: &Amount,
        floor: i64,
    ) -> Result<Reply, sqlx::Error> {
        let q = self.backend.common();
        let sql = if renew { &q.renew } else { &q.release }.sql();
        let id = row_id(id);
        let matched = |ours: bool, clock_ms: Option<i64>| Reply::Matched {
            ours,
            clock_ms: clock_ms.filter(|_| ours).map(unsigned),
        };
        // PostgreSQL and SQLite return the renewal's clock as a row.
        #[cfg(any(feature = "postgres", feature = "sqlite"))]
        macro_rules! update_on {
            ($pool:expr, $amount:expr) => {{
                let query = sqlx::query(sql)
                    .bind($amount)
                    .bind(floor)
                    .bind(id)
                    .bind(&token[..]);
                if renew {
                    let row = query.fetch_optional($pool).await?;
                    matched(row.is_some(), row.map(|row| row.try_get(0)).transpose()?)
                } else {
                    matched(query.execute($pool).await?.rows_affected() == 1, None)
                }
            }};
        }
        Ok(match &self.backend {
            #[cfg(feature = "postgres")]
            Backend::Postgres(pool, _) => update_on!(pool, amount.micros()),
            #[cfg(feature = "mysql")]
            Backend::MySql(pool, _) => {
                let done = sqlx::query(sql)
                    .bind(amount.micros())
                    .bind(floor)
                    .bind(id)
                    .bind(&token[..])
                    .execute(pool)
                    .await?;
                // The renewal reports the clock through LAST_INSERT_ID(expr).
                let clock = i64::try_from(done.last_insert_id()).ok().filter(|_| renew);
                matched(done.rows_affected() == 1, clock)
            }
            #[cfg(feature = "sqlite")]
            Backend::Sqlite(pool, _) => update_on!(pool, amount.modifier()),
            Backend::Never(never) => match *never {},
        })
    }
}
