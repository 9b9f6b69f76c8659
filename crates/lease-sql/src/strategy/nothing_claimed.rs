//! Why a claim found nothing: the table is exhausted, others are claiming its free rows, or
//! the amnesia guard holds acquisition off (a changed server on PostgreSQL and MySQL/MariaDB;
//! deleted rows on every dialect).

use sqlx::Row;

use super::backend::on_pool;
use super::claim::unexpected;
use super::{Connection, SqlStrategy};
use crate::amnesia::{Diagnosis, Rows, RowsVerdict, Verdict};
use crate::transport::{Reply, Request, Transport};
use crate::{AmnesiaGuard, Dialect, SqlLeaseError};

impl<T: Transport> SqlStrategy<T> {
    /// The error for a claim that found nothing: exhausted, a lost race, or held off. `Ok` when
    /// the server was just recorded as trusted and the claim may be tried again.
    pub(super) async fn nothing_claimed(&self, tried: usize) -> Result<(), SqlLeaseError> {
        if self.guarded() {
            return match self.check_server().await? {
                Some((free, rows)) => {
                    self.check_rows(rows).await?;
                    Err(self.shortage(free, tried))
                }
                None => Ok(()),
            };
        }
        if self.dialect() == Dialect::Sqlite && self.amnesia_guard == AmnesiaGuard::HoldOff {
            let (free, rows) = match self.exchange(Request::DiagnoseRows).await? {
                Reply::Rows { free, rows } => (free, rows),
                other => return Err(unexpected(Request::DiagnoseRows.name(), &other)),
            };
            self.check_rows(rows).await?;
            return Err(self.shortage(free, tried));
        }
        let free = self.free_rows().await?;
        Err(self.shortage(free, tried))
    }

    /// How many rows are free, as the database counts them.
    pub(super) async fn free_rows(&self) -> Result<i64, SqlLeaseError> {
        match self.exchange(Request::CountFree).await? {
            Reply::Free(free) => Ok(free),
            other => Err(unexpected(Request::CountFree.name(), &other)),
        }
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
                self.exchange(Request::Restore).await?;
                Err(held_off(blocked + missing, self.amnesia_hold_off()))
            }
            RowsVerdict::Blocked { blocked, remaining } => Err(held_off(blocked, remaining)),
            RowsVerdict::Intact => Ok(()),
        }
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

    /// Asks the database whether the server is the one that granted the table's leases, and
    /// acts on the [`Verdict`]: the free rows and what the rows say when the guard passed,
    /// `None` when the server was just recorded as trusted, else the hold-off error.
    async fn check_server(&self) -> Result<Option<(i64, Rows)>, SqlLeaseError> {
        let table = self.table.as_str().to_owned();
        let held_off = |previous, current, remaining| SqlLeaseError::ServerChanged {
            table: table.clone(),
            previous,
            current,
            remaining,
        };
        let diagnosis = match self.exchange(Request::Diagnose).await? {
            Reply::Diagnosis(diagnosis) => diagnosis,
            other => return Err(unexpected(Request::Diagnose.name(), &other)),
        };
        match diagnosis.verdict() {
            Verdict::Standby => Err(SqlLeaseError::Standby),
            Verdict::Trust { current } => {
                self.exchange(Request::Record {
                    identity: current,
                    trusted: true,
                })
                .await?;
                Ok(None)
            }
            Verdict::RecordAndHoldOff { current } => {
                self.exchange(Request::Record {
                    identity: current.clone(),
                    trusted: false,
                })
                .await?;
                Err(held_off(None, current, self.amnesia_hold_off()))
            }
            Verdict::Changed { recorded, current } => {
                self.exchange(Request::Replace {
                    current: current.clone(),
                    recorded: recorded.clone(),
                })
                .await?;
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
}

impl Connection {
    /// Puts the missing rows of the seeded table back, blocked for the amnesia hold-off.
    pub(super) async fn restore_rows(&self) -> Result<(), sqlx::Error> {
        let sql = self.backend.common().restore.sql();
        on_pool!(&self.backend, |pool| sqlx::query(sql)
            .execute(pool)
            .await
            .map(|_| ()))
    }

    /// How many rows are free, as the database counts them.
    pub(super) async fn count_free(&self) -> Result<i64, sqlx::Error> {
        let sql = self.backend.common().count_free.sql();
        on_pool!(&self.backend, |pool| sqlx::query(sql)
            .fetch_one(pool)
            .await?
            .try_get(0))
    }

    /// The deleted-rows check alone (SQLite): the free rows and what the rows say.
    pub(super) async fn diagnose_rows(&self) -> Result<(i64, Rows), sqlx::Error> {
        #[cfg(feature = "sqlite")]
        if let super::backend::Backend::Sqlite(pool, queries) = &self.backend {
            let row = sqlx::query(queries.diagnose.sql()).fetch_one(pool).await?;
            let rows = Rows {
                present: row.try_get(1)?,
                blocked: row.try_get(2)?,
                blocked_remaining_us: row.try_get(3)?,
            };
            return Ok((row.try_get::<i64, _>(0)?, rows));
        }
        Err(not_on(
            self.backend.dialect(),
            "the deleted-rows check alone",
        ))
    }

    /// Reads what the database says about the server and the table after a guarded claim
    /// found nothing.
    pub(super) async fn diagnose(&self) -> Result<Diagnosis, sqlx::Error> {
        #[cfg(any(feature = "postgres", feature = "mysql"))]
        if let Some(amnesia) = self.backend.amnesia() {
            let sql = amnesia.diagnose.sql();
            return on_pool!(&self.backend, |pool| {
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
            });
        }
        Err(not_on(self.backend.dialect(), "the server check"))
    }

    /// Records `identity` for the table if nothing is recorded: trusted (no hold-off) or from
    /// now on.
    #[cfg_attr(
        not(any(feature = "postgres", feature = "mysql")),
        expect(
            unused_variables,
            reason = "only PostgreSQL and MySQL record the server"
        )
    )]
    pub(super) async fn record(&self, identity: &str, trusted: bool) -> Result<(), sqlx::Error> {
        #[cfg(any(feature = "postgres", feature = "mysql"))]
        if let Some(amnesia) = self.backend.amnesia() {
            let sql = amnesia.record.sql();
            return on_pool!(&self.backend, |pool| sqlx::query(sql)
                .bind(identity)
                .bind(trusted)
                .execute(pool)
                .await
                .map(|_| ()));
        }
        Err(not_on(self.backend.dialect(), "the server record"))
    }

    /// Replaces the recorded server `recorded` by `current`, from now on (a no-op if another
    /// node did it first).
    #[cfg_attr(
        not(any(feature = "postgres", feature = "mysql")),
        expect(
            unused_variables,
            reason = "only PostgreSQL and MySQL record the server"
        )
    )]
    pub(super) async fn replace(&self, current: &str, recorded: &str) -> Result<(), sqlx::Error> {
        #[cfg(any(feature = "postgres", feature = "mysql"))]
        if let Some(amnesia) = self.backend.amnesia() {
            let sql = amnesia.replace.sql();
            return on_pool!(&self.backend, |pool| sqlx::query(sql)
                .bind(current)
                .bind(recorded)
                .execute(pool)
                .await
                .map(|_| ()));
        }
        Err(not_on(self.backend.dialect(), "the server record"))
    }
}

/// A request for a statement `dialect` does not have.
fn not_on(dialect: Dialect, what: &str) -> sqlx::Error {
    sqlx::Error::Protocol(format!("{dialect} has no statement for {what}"))
}
