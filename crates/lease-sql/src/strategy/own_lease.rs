//! Renewal and release: the writes to a lease row that we hold, matched by ID and token.

use lease_core::{MachineId, Release, Renew, Renewal};
#[cfg(any(feature = "postgres", feature = "sqlite"))]
use sqlx::Row;

use super::SqlStrategy;
use super::amount::Amount;
use super::backend::{Backend, on_pool};
use super::lease::{SqlLease, row_id, signed, unsigned};
use crate::SqlLeaseError;

/// A write to a row we hold.
#[derive(Clone, Copy)]
enum OwnWrite {
    /// Extend the lease and raise the floor; the database reports its clock.
    Renew,
    /// Release with a guard, clear the token and set the floor.
    Release,
}

/// What a write to a row we hold found.
enum Matched {
    /// The row no longer carries our token: expired and taken over, released, or forgotten.
    NotOurs,
    /// The write applied; the database clock (Unix ms) if the dialect reports it.
    Ours { clock_ms: Option<i64> },
}

impl SqlStrategy {
    /// Extends `lease` to the requested duration (shortened to the longest lease) and raises
    /// its floor to at least the request's.
    pub(super) async fn renew_own(
        &self,
        lease: &SqlLease,
        request: Renew,
    ) -> Result<Renewal<SqlLease>, SqlLeaseError> {
        let amount = self.lease_amount(request.requested)?;
        let matched = self
            .write_own(OwnWrite::Renew, lease, &amount, signed(request.floor_ms))
            .await?;
        match matched {
            Matched::Ours { clock_ms } => {
                let renewal = Renewal::new(*lease, amount.applied);
                Ok(match clock_ms {
                    Some(ms) if self.guarded() => renewal
                        .with_coordinator_ms(unsigned(ms))
                        .with_max_clock_offset(self.max_clock_offset),
                    Some(ms) => renewal.with_coordinator_ms(unsigned(ms)),
                    None => renewal,
                })
            }
            Matched::NotOurs => Err(SqlLeaseError::Lost {
                machine_id: lease.machine_id(),
            }),
        }
    }

    /// Releases `lease`, keeping the ID blocked for the request's guard and setting the row's
    /// floor to the request's; when the row is no longer ours, its floor is only raised to it.
    /// The token is cleared, so a renewal that arrives later is lost.
    pub(super) async fn release_own(
        &self,
        lease: &SqlLease,
        request: Release,
    ) -> Result<(), SqlLeaseError> {
        let amount = Amount::new(request.guard, self.dialect())?;
        let floor = signed(request.floor_ms);
        // A row that no longer carries our token is someone else's: the release leaves it alone.
        let matched = self
            .write_own(OwnWrite::Release, lease, &amount, floor)
            .await?;
        if let Matched::NotOurs = matched {
            // Not ours any more (expired, taken over, or forgotten by a database that lost
            // writes): only raise the floor, so what was issued under the lease is known.
            self.checked(self.raise_floor(lease.machine_id(), floor).await)
                .await?;
        }
        Ok(())
    }

    /// Runs `write` on our row, its error [explained](Self::explain).
    async fn write_own(
        &self,
        write: OwnWrite,
        lease: &SqlLease,
        amount: &Amount,
        floor: i64,
    ) -> Result<Matched, SqlLeaseError> {
        self.checked(self.update_own(write, lease, amount, floor).await)
            .await
    }

    /// Runs the renew or release statement, matched by `lease`'s ID and token.
    async fn update_own(
        &self,
        write: OwnWrite,
        lease: &SqlLease,
        amount: &Amount,
        floor: i64,
    ) -> Result<Matched, sqlx::Error> {
        let common = self.backend.common();
        let (statement, returns_clock) = match write {
            OwnWrite::Renew => (&common.renew, true),
            OwnWrite::Release => (&common.release, false),
        };
        let sql = statement.sql();
        let id = row_id(lease.machine_id());
        let token = lease.token();
        // PostgreSQL and SQLite return the renewal's clock as a row.
        #[cfg(any(feature = "postgres", feature = "sqlite"))]
        macro_rules! update_on {
            ($pool:expr, $amount:expr) => {{
                let query = sqlx::query(sql)
                    .bind($amount)
                    .bind(floor)
                    .bind(id)
                    .bind(&token[..]);
                if returns_clock {
                    match query.fetch_optional($pool).await? {
                        Some(row) => Matched::Ours {
                            clock_ms: Some(row.try_get(0)?),
                        },
                        None => Matched::NotOurs,
                    }
                } else if query.execute($pool).await?.rows_affected() == 1 {
                    Matched::Ours { clock_ms: None }
                } else {
                    Matched::NotOurs
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
                if done.rows_affected() == 1 {
                    // The renewal reports the clock through LAST_INSERT_ID(expr).
                    Matched::Ours {
                        clock_ms: returns_clock
                            .then(|| i64::try_from(done.last_insert_id()).ok())
                            .flatten(),
                    }
                } else {
                    Matched::NotOurs
                }
            }
            #[cfg(feature = "sqlite")]
            Backend::Sqlite(pool, _) => update_on!(pool, amount.modifier()),
            Backend::Never(never) => match *never {},
        })
    }

    /// Raises `id`'s floor to at least `floor`, whoever holds it.
    async fn raise_floor(&self, id: MachineId, floor: i64) -> Result<(), sqlx::Error> {
        let sql = self.backend.common().raise_floor.sql();
        let id = row_id(id);
        on_pool!(&self.backend, |pool| sqlx::query(sql)
            .bind(floor)
            .bind(id)
            .execute(pool)
            .await
            .map(|_| ()))
    }
}
