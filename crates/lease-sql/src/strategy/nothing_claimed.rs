//! Why a claim found nothing: the table is exhausted, others are claiming its free rows, or
//! the amnesia guard holds acquisition off (a changed server on PostgreSQL and MySQL/MariaDB;
//! deleted rows on every dialect).

use sqlx::Row;

use super::SqlStrategy;
use super::backend::on_pool;
use crate::SqlLeaseError;
use crate::amnesia::{Rows, RowsVerdict};
#[cfg(any(feature = "postgres", feature = "mysql"))]
use {
    crate::amnesia::{Diagnosis, Verdict},
    crate::queries::AmnesiaQueries,
};

impl SqlStrategy {
    /// The error for a claim that found nothing: exhausted, a lost race, or held off. `Ok` when
    /// the server was just recorded as trusted and the claim may be tried again.
    pub(super) async fn nothing_claimed(&self, tried: usize) -> Result<(), SqlLeaseError> {
        #[cfg(any(feature = "postgres", feature = "mysql"))]
        if let Some(amnesia) = self.backend.amnesia().filter(|_| self.guarded()) {
            return match self.check_server(amnesia).await? {
                Some((free, rows)) => {
                    self.check_rows(rows).await?;
                    Err(self.shortage(free, tried))
                }
                None => Ok(()),
            };
        }
        #[cfg(feature = "sqlite")]
        if let super::backend::Backend::Sqlite(pool, queries) = &self.backend
            && self.amnesia_guard == crate::AmnesiaGuard::HoldOff
        {
            let read = async {
                let row = sqlx::query(queries.diagnose.sql()).fetch_one(pool).await?;
                let rows = Rows {
                    present: row.try_get(1)?,
                    blocked: row.try_get(2)?,
                    blocked_remaining_us: row.try_get(3)?,
                };
                Ok::<_, sqlx::Error>((row.try_get::<i64, _>(0)?, rows))
            };
            let (free, rows) = self.checked(read.await).await?;
            self.check_rows(rows).await?;
            return Err(self.shortage(free, tried));
        }
        let free = self.count_free().await.map_err(|e| self.error(e))?;
        Err(self.shortage(free, tried))
    }

    /// Acts on what the rows say: missing rows are put back blocked, and while rows put back
    /// are blocked, acquisition is held off.
    async fn check_rows(&self, rows: Rows) -> Result<(), SqlLeaseError> {
        let held_off = |blocked, remaining| SqlLeaseError::RowsDeleted {
            table: self.table.as_str().to_owned(),
            blocked,
            remaining,
        };
        match rows.verdict() {
            RowsVerdict::Missing { missing, blocked } => {
                self.checked(self.restore_rows().await).await?;
                Err(held_off(blocked + missing, self.amnesia_hold_off()))
            }
            RowsVerdict::Blocked { blocked, remaining } => Err(held_off(blocked, remaining)),
            RowsVerdict::Intact => Ok(()),
        }
    }

    /// Puts the missing rows of the seeded table back, blocked for the amnesia hold-off.
    async fn restore_rows(&self) -> Result<(), sqlx::Error> {
        let sql = self.backend.common().restore.sql();
        on_pool!(&self.backend, |pool| sqlx::query(sql)
            .execute(pool)
            .await
            .map(|_| ()))
    }

    /// No ID for us although the guard passed: free rows that we could not claim are being
    /// claimed by others right now; without any, the table is exhausted.
    fn shortage(&self, free: i64, tried: usize) -> SqlLeaseError {
        if free > 0 || tried > 0 {
            SqlLeaseError::Conflict {
                candidates: tried.max(usize::try_from(free).unwrap_or(0)),
            }
        } else {
            SqlLeaseError::Exhausted {
                table: self.table.as_str().to_owned(),
            }
        }
    }
}

#[cfg(any(feature = "postgres", feature = "mysql"))]
impl SqlStrategy {
    /// Asks the database whether the server is the one that granted the table's leases, and
    /// acts on the [`Verdict`]: the free rows and what the rows say when the guard passed,
    /// `None` when the server was just recorded as trusted, else the hold-off error.
    async fn check_server(
        &self,
        amnesia: &AmnesiaQueries,
    ) -> Result<Option<(i64, Rows)>, SqlLeaseError> {
        let fail = |e| self.error(e);
        let table = self.table.as_str().to_owned();
        let held_off = |previous, current, remaining| SqlLeaseError::ServerChanged {
            table: table.clone(),
            previous,
            current,
            remaining,
        };
        match self.diagnose(amnesia).await.map_err(fail)?.verdict() {
            Verdict::Standby => Err(SqlLeaseError::Standby),
            Verdict::Trust { current } => {
                self.record(amnesia, &current, true).await.map_err(fail)?;
                Ok(None)
            }
            Verdict::RecordAndHoldOff { current } => {
                self.record(amnesia, &current, false).await.map_err(fail)?;
                Err(held_off(None, current, self.amnesia_hold_off()))
            }
            Verdict::Changed { recorded, current } => {
                self.replace(amnesia, &current, &recorded)
                    .await
                    .map_err(fail)?;
                Err(held_off(Some(recorded), current, self.amnesia_hold_off()))
            }
            Verdict::HoldOff {
                previous,
                current,
                remaining,
            } => Err(held_off(previous, current, remaining)),
            Verdict::Passed { free, rows } => Ok(Some((free, rows))),
        }
    }

    /// Reads what the database says about the server and the table after a guarded claim
    /// found nothing.
    async fn diagnose(&self, amnesia: &AmnesiaQueries) -> Result<Diagnosis, sqlx::Error> {
        let sql = amnesia.diagnose.sql();
        on_pool!(&self.backend, |pool| {
            let row = sqlx::query(sql).fetch_one(pool).await?;
            let claimed: i64 = match row.try_get::<bool, _>(5) {
                Ok(claimed) => i64::from(claimed),
                Err(_) => row.try_get(5)?,
            };
            Ok(Diagnosis {
                current: row.try_get(0)?,
                recorded: row.try_get(1)?,
                previous: row.try_get(2)?,
                remaining_us: row.try_get(3)?,
                free: row.try_get(4)?,
                claimed: claimed != 0,
                rows: Rows {
                    present: row.try_get(6)?,
                    blocked: row.try_get(7)?,
                    blocked_remaining_us: row.try_get(8)?,
                },
            })
        })
    }

    /// Records `identity` for the table if nothing is recorded: trusted (no hold-off) or from
    /// now on.
    async fn record(
        &self,
        amnesia: &AmnesiaQueries,
        identity: &str,
        trusted: bool,
    ) -> Result<(), sqlx::Error> {
        let sql = amnesia.record.sql();
        on_pool!(&self.backend, |pool| sqlx::query(sql)
            .bind(identity)
            .bind(trusted)
            .execute(pool)
            .await
            .map(|_| ()))
    }

    /// Replaces the recorded server `recorded` by `current`, from now on (a no-op if another
    /// node did it first).
    async fn replace(
        &self,
        amnesia: &AmnesiaQueries,
        current: &str,
        recorded: &str,
    ) -> Result<(), sqlx::Error> {
        let sql = amnesia.replace.sql();
        on_pool!(&self.backend, |pool| sqlx::query(sql)
            .bind(current)
            .bind(recorded)
            .execute(pool)
            .await
            .map(|_| ()))
    }
}
